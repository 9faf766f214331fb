// The replay page's script: it draws each plant's animation and charts from the
// recorded trajectories embedded in the page (little-endian f64, per tick the
// observations then the inputs). It runs no physics and loads nothing.
(function () {
  'use strict';

  const root = document.documentElement;
  const TAU = 2 * Math.PI;
  const DEG = 180 / Math.PI;
  const LIMIT = '#d03b3b';
  const BAND = '#2e9e5b';
  const CLAMP = '#7d868f';
  const INK = '#1d232b';
  const MUTED = '#5b6570';
  const FONT = 'system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif';
  const MONO = 'ui-monospace, Menlo, Consolas, "DejaVu Sans Mono", monospace';
  const PLAY_SECONDS = 20; // a whole run plays in this many seconds at speed 1
  const HOLD_SECONDS = 1.5; // the pause at the end before looping

  // ---------------------------------------------------------------- helpers

  function esc(s) {
    return String(s).replace(
      /[&<>"']/g,
      (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c],
    );
  }

  function clamp(v, lo, hi) {
    return v < lo ? lo : v > hi ? hi : v;
  }

  /** A number for reading: four significant digits. */
  function fmt(v) {
    if (!Number.isFinite(v)) return String(v);
    if (v === 0) return '0';
    const a = Math.abs(v);
    if (a >= 1e6 || a < 1e-3)
      return v
        .toExponential(2)
        .replace(/\.?0+e/, 'e')
        .replace('e+', 'e');
    return String(Number(v.toPrecision(4)));
  }

  /** A number with `d` decimals, no negative zero. */
  function fixed(v, d) {
    if (!Number.isFinite(v)) return String(v);
    const s = v.toFixed(d);
    return /^-0\.?0*$/.test(s) ? s.slice(1) : s;
  }

  function rgba(hex, a) {
    const n = parseInt(hex.slice(1), 16);
    return 'rgba(' + ((n >> 16) & 255) + ',' + ((n >> 8) & 255) + ',' + (n & 255) + ',' + a + ')';
  }

  /** The trajectory's doubles, read little-endian whatever the machine. */
  function decode(b64) {
    const bin = atob(b64);
    const view = new DataView(new ArrayBuffer(bin.length));
    for (let i = 0; i < bin.length; i++) view.setUint8(i, bin.charCodeAt(i));
    const out = new Float64Array(bin.length >> 3);
    for (let i = 0; i < out.length; i++) out[i] = view.getFloat64(i * 8, true);
    return out;
  }

  /** Tick marks for lo..hi: about `n` round numbers. */
  function ticks(lo, hi, n) {
    const span = hi - lo;
    if (!(span > 0)) return [lo];
    const raw = span / n;
    const p = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 2.5, 5, 10].map((m) => m * p).find((s) => s >= raw) || 10 * p;
    const out = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step)
      out.push(Math.abs(v) < step * 1e-9 ? 0 : v);
    return out;
  }

  function wrap180(d) {
    return ((((d + 180) % 360) + 360) % 360) - 180;
  }

  /** A canvas that follows its box's width at the device's pixel ratio. */
  function sizeCanvas(canvas, height) {
    const w = Math.max(320, canvas.parentNode.clientWidth || 960);
    const r = window.devicePixelRatio || 1;
    canvas.width = Math.round(w * r);
    canvas.height = Math.round(height * r);
    canvas.style.height = height + 'px';
    const c = canvas.getContext('2d');
    c.setTransform(r, 0, 0, r, 0, 0);
    return { c, W: w, H: height };
  }

  function text(c, s, x, y, opts) {
    const o = opts || {};
    c.font = (o.weight || '') + ' ' + (o.size || 12) + 'px ' + (o.mono ? MONO : FONT);
    c.fillStyle = o.colour || INK;
    c.textAlign = o.align || 'left';
    c.textBaseline = o.base || 'alphabetic';
    c.fillText(s, x, y);
  }

  function lineTo(c, x0, y0, x1, y1, colour, width, dash) {
    c.beginPath();
    c.setLineDash(dash || []);
    c.strokeStyle = colour;
    c.lineWidth = width || 1;
    c.moveTo(x0, y0);
    c.lineTo(x1, y1);
    c.stroke();
    c.setLineDash([]);
  }

  // ---------------------------------------------------------------- the data

  const DATA = JSON.parse(document.getElementById('plimsoll-data').textContent);

  function prepare(plant) {
    for (const [i, r] of plant.runs.entries()) {
      r.index = i;
      r.vals = decode(r.trajectory);
      r.stride = r.width + r.nin;
      r.get = (k, col) => r.vals[clamp(k, 0, r.ticks - 1) * r.stride + col];
    }
    plant.hmin = Math.min(...plant.runs.map((r) => r.h));
    plant.tmax = Math.max(...plant.runs.map((r) => Math.max(0, r.ticks - 1) * r.h));
    plant.steps = Math.max(1, Math.round(plant.tmax / plant.hmin));
    plant.limitsOf = (col) => plant.limits.filter((l) => l.col === col);
  }

  /** The time for reading, in the chart unit. */
  function clockText(plant, t) {
    const step = plant.hmin * plant.time.scale;
    const d = clamp(Math.ceil(-Math.log10(step) - 1e-9), 0, 6);
    if (plant.time.shown === 'tick') return 'tick ' + fixed(t * plant.time.scale, 0);
    return 't = ' + fixed(t * plant.time.scale, d) + ' ' + plant.time.shown;
  }

  // ---------------------------------------------------------------- the player

  const players = [];

  class Player {
    constructor(plant, host, anim) {
      this.plant = plant;
      this.anim = anim;
      this.j = 0;
      this.playing = false;
      this.loop = true;
      this.speed = 1;
      this.acc = 0;
      this.hold = 0;
      this.visible = true;
      this.watchers = [];
      if (anim.setup) anim.setup(plant);

      const legend = document.createElement('div');
      legend.className = 'legend';
      this.status = plant.runs.map((r) => {
        const item = document.createElement('span');
        item.innerHTML =
          '<span class="swatch c' + (r.index % 6) + '"></span><b>' + esc(r.label) + '</b> <span class="status"></span>';
        legend.appendChild(item);
        return item.querySelector('.status');
      });
      const stage = document.createElement('div');
      stage.className = 'stage';
      this.canvas = document.createElement('canvas');
      this.canvas.setAttribute('role', 'img');
      this.canvas.setAttribute('aria-label', 'Replay of ' + plant.title + ' from the recorded trajectories');
      const controls = document.createElement('div');
      controls.className = 'controls';
      controls.innerHTML =
        '<button type="button" class="play">Play</button>' +
        '<input type="range" min="0" step="1" aria-label="Time">' +
        '<span class="clock"></span>' +
        '<label><input type="checkbox" class="loop" checked> loop</label>' +
        '<label>speed <select class="speed"><option value="0.25">¼×</option><option value="0.5">½×</option>' +
        '<option value="1" selected>1×</option><option value="2">2×</option><option value="4">4×</option></select></label>' +
        '<span class="rate note"></span>';
      stage.appendChild(legend);
      stage.appendChild(this.canvas);
      stage.appendChild(controls);
      host.appendChild(stage);

      this.button = controls.querySelector('.play');
      this.scrub = controls.querySelector('input[type=range]');
      this.clock = controls.querySelector('.clock');
      this.rate = controls.querySelector('.rate');
      this.scrub.max = String(plant.steps);
      this.button.addEventListener('click', () => (this.playing ? this.pause() : this.play()));
      this.scrub.addEventListener('input', () => {
        this.pause();
        this.seek(Number(this.scrub.value));
      });
      controls.querySelector('.loop').addEventListener('change', (e) => (this.loop = e.target.checked));
      controls.querySelector('.speed').addEventListener('change', (e) => {
        this.speed = Number(e.target.value);
        this.showRate();
      });
      this.showRate();
      this.resize();
      if ('IntersectionObserver' in window) {
        new IntersectionObserver((es) => es.forEach((e) => (this.visible = e.isIntersecting))).observe(stage);
      }
    }

    showRate() {
      const real = ((this.plant.tmax + this.plant.hmin) * this.speed) / PLAY_SECONDS; // plant time per second of playback
      const unit = this.plant.time.unit;
      let s;
      if (unit === 's') {
        s = real >= 0.995 ? '×' + fmt(real) + ' real time' : '1/' + fmt(1 / real) + ' of real time';
      } else {
        s = fmt(real) + ' ' + unit + ' a second';
      }
      this.rate.textContent = 'playing at ' + s;
    }

    /** The time now, in the plant's unit. */
    time() {
      return this.j * this.plant.hmin;
    }

    /** The tick of run `r` shown now. */
    tick(r) {
      return clamp(Math.round(this.time() / r.h), 0, r.ticks - 1);
    }

    resize() {
      this.g = sizeCanvas(this.canvas, this.anim.height);
      this.draw();
    }

    seek(j) {
      this.j = clamp(Math.round(j), 0, this.plant.steps);
      this.draw();
    }

    draw() {
      const { c, W, H } = this.g;
      c.clearRect(0, 0, W, H);
      this.anim.draw(c, W, H, this);
      for (const [i, r] of this.plant.runs.entries()) {
        this.status[i].textContent = this.anim.status(r, this.tick(r), this);
      }
      this.scrub.value = String(this.j);
      this.clock.textContent = clockText(this.plant, this.time());
      for (const w of this.watchers) w(this.time());
    }

    play() {
      if (this.j >= this.plant.steps) this.j = 0;
      this.playing = true;
      this.hold = 0;
      this.button.textContent = 'Pause';
    }

    pause() {
      this.playing = false;
      this.button.textContent = 'Play';
    }

    /** Advances by `dt` seconds of playback. */
    advance(dt) {
      if (!this.playing || !this.visible) return;
      if (this.j >= this.plant.steps) {
        this.hold += dt;
        if (this.hold < HOLD_SECONDS) return;
        if (!this.loop) return this.pause();
        this.hold = 0;
        this.acc = 0;
        this.seek(0);
        return;
      }
      this.acc += (dt * this.speed * this.plant.steps) / PLAY_SECONDS;
      const n = Math.floor(this.acc);
      if (n > 0) {
        this.acc -= n;
        this.seek(this.j + n);
      }
    }
  }

  let last = null;
  function frame(ts) {
    const dt = last === null ? 0 : Math.min(0.1, (ts - last) / 1000);
    last = ts;
    for (const p of players) p.advance(dt);
    requestAnimationFrame(frame);
  }

  // ---------------------------------------------------------------- animations

  /** Per-run facts found once: first tick past a limit, and so on. */
  function firstTick(r, test) {
    for (let k = 0; k < r.ticks; k++) if (test(k)) return k;
    return -1;
  }

  function cartPole(swing) {
    return {
      height: swing ? 440 : 330,
      setup(plant) {
        for (const r of plant.runs) {
          r.fell = firstTick(r, (k) => Math.abs(r.get(k, 2)) > Math.PI / 2);
          r.offTrack = firstTick(r, (k) => Math.abs(r.get(k, 0)) > 2.4);
        }
      },
      draw(c, W, H, P) {
        const span = swing ? 3.0 : 2.6;
        const maxL = Math.max(...P.plant.runs.map((r) => 2 * r.params[1]));
        // Room for the pole above the cart, and for swing-up below the rail too.
        const s = Math.min((W - 80) / (2 * span), swing ? (H - 110) / (2 * maxL) : (H - 120) / maxL);
        const railY = swing ? 24 + maxL * s + 34 : H - 62;
        const X = (x) => W / 2 + x * s;
        lineTo(c, X(-span), railY, X(span), railY, '#8d959d', 2);
        for (let m = -Math.floor(span); m <= Math.floor(span); m++) {
          lineTo(c, X(m), railY, X(m), railY + 6, '#8d959d', 1);
          text(c, m + ' m', X(m), railY + 20, { align: 'center', colour: MUTED, size: 11 });
        }
        if (swing) {
          for (const e of [-2.4, 2.4]) {
            lineTo(c, X(e), railY - 30, X(e), railY + 8, LIMIT, 3);
          }
          text(c, 'track ends at ±2.4 m (off track: score 0)', X(2.4), railY + 38, {
            align: 'right',
            colour: LIMIT,
            size: 11,
          });
        } else {
          text(c, 'the rail is drawn 5.2 m wide; a cart beyond it is pinned at the edge', X(span), railY + 38, {
            align: 'right',
            colour: MUTED,
            size: 11,
          });
        }
        for (const r of P.plant.runs) {
          const k = P.tick(r);
          const x = r.get(k, 0);
          const th = r.get(k, 2);
          const off = !(Math.abs(x) <= span);
          const cx = X(clamp(Number.isFinite(x) ? x : 0, -span, span));
          const top = railY - 34;
          c.fillStyle = rgba(r.colour, off ? 0.08 : 0.2);
          c.strokeStyle = r.colour;
          c.lineWidth = 2;
          c.setLineDash(off ? [5, 4] : []);
          c.fillRect(cx - 34, top, 68, 26);
          c.strokeRect(cx - 34, top, 68, 26);
          c.setLineDash([]);
          for (const wx of [-20, 20]) {
            c.beginPath();
            c.arc(cx + wx, railY - 6, 6, 0, TAU);
            c.fillStyle = '#fff';
            c.fill();
            c.stroke();
          }
          const L = 2 * r.params[1] * s;
          const ex = cx + L * Math.sin(th);
          const ey = top - L * Math.cos(th);
          lineTo(c, cx, top, ex, ey, r.colour, 5);
          c.beginPath();
          c.arc(ex, ey, 7, 0, TAU);
          c.fillStyle = r.colour;
          c.fill();
          c.beginPath();
          c.arc(cx, top, 3.5, 0, TAU);
          c.fillStyle = INK;
          c.fill();
          if (off) {
            text(c, (x > 0 ? 'off the rail →' : '← off the rail') + ' (x ' + fmt(x) + ' m)', cx, 18 + 16 * r.index, {
              align: x > 0 ? 'right' : 'left',
              colour: r.colour,
              size: 12,
              weight: '600',
            });
          }
        }
      },
      status(r, k) {
        const x = r.get(k, 0);
        const th = r.get(k, 2);
        const f = r.get(k, 4);
        let s = 'x ' + fixed(x, 2) + ' m, angle ' + fixed(wrap180(th * DEG), 1) + '°, force ' + fixed(f, 1) + ' N';
        if (!swing && r.fell >= 0 && k >= r.fell) s += ' · fell at ' + fmt(r.fell * r.h) + ' s';
        if (swing) {
          if (r.offTrack >= 0 && k >= r.offTrack) s += ' · off the track at ' + fmt(r.offTrack * r.h) + ' s';
          else s += Math.cos(th) > 0.98 ? ' · upright' : ' · swinging';
        }
        return s;
      },
    };
  }

  /** Water colour: blue when cold, orange when warm, red when scalding. */
  function tempColour(t) {
    let hue;
    if (t <= 12) hue = 212;
    else if (t <= 38) hue = 212 - ((t - 12) / 26) * 177;
    else hue = Math.max(0, 35 - ((t - 38) / 7) * 35);
    return 'hsl(' + hue.toFixed(0) + ', 78%, 50%)';
  }

  const shower = {
    height: 320,
    draw(c, W, H, P) {
      const runs = P.plant.runs;
      const pw = Math.min(420, W / runs.length);
      const x0 = (W - pw * runs.length) / 2;
      for (const r of runs) {
        const k = P.tick(r);
        const t = r.get(k, 0);
        const valve = r.get(k, 1);
        const cmd = r.get(k, 2);
        const left = x0 + r.index * pw;
        const hx = left + pw * 0.36;
        text(c, r.label, left + 14, 22, { colour: r.colour, weight: '600', size: 13 });
        // The pipe from the valve, and the head.
        lineTo(c, left + 14, 50, hx, 50, '#9aa3ab', 8);
        lineTo(c, hx, 46, hx, 70, '#9aa3ab', 8);
        c.beginPath();
        c.moveTo(hx - 46, 92);
        c.lineTo(hx + 46, 92);
        c.lineTo(hx + 16, 70);
        c.lineTo(hx - 16, 70);
        c.closePath();
        c.fillStyle = '#c8ced4';
        c.fill();
        // The valve.
        c.beginPath();
        c.arc(left + 24, 50, 11, 0, TAU);
        c.fillStyle = '#fff';
        c.fill();
        c.strokeStyle = '#6b747d';
        c.lineWidth = 2;
        c.stroke();
        const va = -Math.PI / 2 + clamp(valve, 0, 1) * Math.PI;
        lineTo(c, left + 24, 50, left + 24 + 9 * Math.cos(va), 50 + 9 * Math.sin(va), INK, 2);
        // The water.
        const col = tempColour(t);
        const bottom = H - 70;
        for (let i = 0; i < 26; i++) {
          const dx = -38 + (i % 13) * 6.3;
          const y = 98 + ((i * 53 + k * 9) % (bottom - 110));
          const spread = 1 + ((y - 98) / (bottom - 98)) * 0.6;
          lineTo(c, hx + dx * spread, y, hx + dx * spread * 1.02, y + 12, col, 2.5);
        }
        // The thermometer: 10 to 60 °C, the comfort band and the scald line.
        const tx = left + pw * 0.72;
        const top = 40;
        const Y = (v) => bottom - ((clamp(v, 10, 60) - 10) / 50) * (bottom - top);
        c.fillStyle = '#f1f3f5';
        c.fillRect(tx - 9, top, 18, bottom - top);
        c.fillStyle = rgba(BAND, 0.35);
        c.fillRect(tx - 16, Y(39), 32, Y(37) - Y(39));
        lineTo(c, tx - 18, Y(43), tx + 18, Y(43), LIMIT, 2);
        text(c, '43 °C scald', tx + 22, Y(43) + 4, { colour: LIMIT, size: 11 });
        text(c, '37–39 °C', tx + 22, Y(38) + 4, { colour: '#237a46', size: 11 });
        for (const v of [10, 20, 30, 50, 60])
          text(c, v + '', tx - 14, Y(v) + 4, { align: 'right', colour: MUTED, size: 10 });
        c.fillStyle = col;
        c.fillRect(tx - 6, Y(t), 12, bottom - Y(t));
        c.beginPath();
        c.arc(tx, bottom + 10, 12, 0, TAU);
        c.fill();
        text(c, fixed(t, 1) + ' °C', tx, bottom + 42, { align: 'center', weight: '600', size: 14 });
        // The valve as a bar: its position and the command.
        const bx = left + 14;
        const bw = pw * 0.45;
        const by = H - 34;
        c.fillStyle = '#eef0f2';
        c.fillRect(bx, by, bw, 10);
        c.fillStyle = rgba(r.colour, 0.7);
        c.fillRect(bx, by, bw * clamp(valve, 0, 1), 10);
        lineTo(c, bx + bw * clamp(cmd, 0, 1), by - 4, bx + bw * clamp(cmd, 0, 1), by + 14, INK, 2);
        text(c, 'valve ' + fixed(valve, 3) + ' hot · command ' + fixed(cmd, 3), bx, by + 26, {
          colour: MUTED,
          size: 11,
        });
        const flush = r.params[2];
        const now = k * r.h;
        if (now >= flush && now < flush + 12) {
          text(c, 'toilet flush: the cold pressure drops', left + 14, 38, {
            colour: '#b5842a',
            weight: '600',
            size: 12,
          });
        }
      }
    },
    status(r, k) {
      return 'head ' + fixed(r.get(k, 0), 2) + ' °C, valve ' + fixed(r.get(k, 1), 3);
    },
  };

  const ship = {
    height: 360,
    draw(c, W, H, P) {
      const R = H / 2 - 34;
      const cx = Math.min(W * 0.36, R + 90);
      const cy = H / 2 + 6;
      // Rotation: heading 0 points up, positive turns clockwise (to starboard).
      const at = (deg, rad) => [cx + rad * Math.sin(deg / DEG), cy - rad * Math.cos(deg / DEG)];
      c.beginPath();
      c.arc(cx, cy, R, 0, TAU);
      c.fillStyle = '#eef5fb';
      c.fill();
      c.strokeStyle = '#b8c4cf';
      c.lineWidth = 1;
      c.stroke();
      // The on-course band, 28 to 32 degrees.
      c.beginPath();
      c.moveTo(cx, cy);
      c.arc(cx, cy, R, (28 - 90) / DEG, (32 - 90) / DEG);
      c.closePath();
      c.fillStyle = rgba(BAND, 0.22);
      c.fill();
      for (let d = -180; d < 180; d += 10) {
        const [x0, y0] = at(d, R);
        const [x1, y1] = at(d, R - (d % 30 === 0 ? 10 : 5));
        lineTo(c, x0, y0, x1, y1, '#8d959d', 1);
        if (d % 30 === 0) {
          const [tx, ty] = at(d, R + 14);
          text(c, d + '°', tx, ty + 4, { align: 'center', colour: MUTED, size: 10 });
        }
      }
      const [ox, oy] = at(30, R);
      lineTo(c, cx, cy, ox, oy, BAND, 2, [6, 4]);
      const [lx, ly] = at(45, R);
      lineTo(c, cx, cy, lx, ly, LIMIT, 2);
      const [olx, oly] = at(30, R + 28);
      text(c, 'ordered 30°', olx + 4, oly, { colour: '#237a46', size: 11 });
      const [llx, lly] = at(45, R + 24);
      text(c, 'overshoot 45°', llx + 8, lly + 8, { colour: LIMIT, size: 11 });
      for (const r of P.plant.runs) {
        const k = P.tick(r);
        const psi = r.get(k, 0);
        const delta = r.get(k, 2);
        c.save();
        c.translate(cx, cy);
        c.rotate(psi);
        const L = R * 0.62;
        const B = R * 0.11;
        c.beginPath();
        c.moveTo(0, -L);
        c.quadraticCurveTo(B * 1.2, -L * 0.45, B, L * 0.55);
        c.lineTo(-B, L * 0.55);
        c.quadraticCurveTo(-B * 1.2, -L * 0.45, 0, -L);
        c.closePath();
        c.fillStyle = rgba(r.colour, 0.22);
        c.fill();
        c.strokeStyle = r.colour;
        c.lineWidth = 2;
        c.stroke();
        // The rudder: its trailing edge swings to starboard for a positive angle.
        c.translate(0, L * 0.55);
        lineTo(c, 0, 0, R * 0.13 * Math.sin(delta), R * 0.13 * Math.cos(delta), r.colour, 4);
        c.restore();
        const [hx, hy] = at(psi * DEG, R - 2);
        c.beginPath();
        c.arc(hx, hy, 5, 0, TAU);
        c.fillStyle = r.colour;
        c.fill();
      }
      // Rudder gauges: -35 to 35 degrees, the angle reached and the command.
      const gx = cx + R + 80;
      const gw = Math.min(360, W - gx - 30);
      if (gw > 120) {
        text(c, 'rudder (bar: reached, tick: commanded), stops at ±35°', gx, 40, { colour: MUTED, size: 11 });
        for (const r of P.plant.runs) {
          const k = P.tick(r);
          const y = 70 + r.index * 56;
          const G = (d) => gx + ((clamp(d, -40, 40) + 40) / 80) * gw;
          c.fillStyle = '#eef0f2';
          c.fillRect(G(-35), y, G(35) - G(-35), 12);
          lineTo(c, G(0), y - 4, G(0), y + 16, '#8d959d', 1);
          const dr = r.get(k, 2) * DEG;
          c.fillStyle = rgba(r.colour, 0.75);
          c.fillRect(Math.min(G(0), G(dr)), y, Math.abs(G(dr) - G(0)), 12);
          lineTo(c, G(r.get(k, 3) * DEG), y - 5, G(r.get(k, 3) * DEG), y + 17, INK, 2);
          text(c, r.label + ': ' + fixed(dr, 1) + '° (command ' + fixed(r.get(k, 3) * DEG, 1) + '°)', gx, y + 32, {
            colour: r.colour,
            size: 12,
          });
        }
      }
    },
    status(r, k) {
      return 'heading ' + fixed(r.get(k, 0) * DEG, 1) + '°, yaw rate ' + fixed(r.get(k, 1) * DEG, 2) + '°/s';
    },
  };

  const buck = {
    height: 330,
    draw(c, W, H, P) {
      const runs = P.plant.runs;
      const pw = Math.min(440, W / runs.length);
      const x0 = (W - pw * runs.length) / 2;
      for (const r of runs) {
        const k = P.tick(r);
        const v = r.get(k, 0);
        const i = r.get(k, 1);
        const d = r.get(k, 2);
        const cx = x0 + r.index * pw + pw / 2;
        const cy = 152;
        const R = Math.min(106, pw / 2 - 30);
        const A = (volts) => Math.PI * (0.8 + (clamp(volts, 0, 10) / 10) * 1.4); // 0 V at lower left, 10 V at lower right
        const arc = (a, b, colour, width) => {
          c.beginPath();
          c.arc(cx, cy, R, A(a), A(b));
          c.strokeStyle = colour;
          c.lineWidth = width;
          c.stroke();
        };
        arc(0, 10, '#e3e6ea', 14);
        arc(6, 10, rgba(LIMIT, 0.8), 14);
        arc(4.9, 5.1, BAND, 22);
        for (let u = 0; u <= 10; u++) {
          const a = A(u);
          lineTo(
            c,
            cx + (R - 12) * Math.cos(a),
            cy + (R - 12) * Math.sin(a),
            cx + (R - 20) * Math.cos(a),
            cy + (R - 20) * Math.sin(a),
            '#8d959d',
            1,
          );
          text(c, String(u), cx + (R - 32) * Math.cos(a), cy + (R - 32) * Math.sin(a) + 4, {
            align: 'center',
            colour: MUTED,
            size: 10,
          });
        }
        text(c, '6 V limit', cx + (R + 8) * Math.cos(A(6)), cy + (R + 8) * Math.sin(A(6)) - 6, {
          colour: LIMIT,
          size: 11,
        });
        text(c, '4.9–5.1 V', cx, cy - R - 14, { align: 'center', colour: '#237a46', size: 11 });
        const a = A(Number.isFinite(v) ? v : 0);
        lineTo(c, cx, cy, cx + (R - 6) * Math.cos(a), cy + (R - 6) * Math.sin(a), r.colour, 3);
        c.beginPath();
        c.arc(cx, cy, 6, 0, TAU);
        c.fillStyle = INK;
        c.fill();
        text(c, fixed(v, 3) + ' V', cx, cy + 36, { align: 'center', weight: '600', size: 18, mono: true });
        text(c, r.label, x0 + r.index * pw + 14, 20, { colour: r.colour, weight: '600', size: 13 });
        // The duty cycle and the current, as bars.
        const bx = cx - R;
        const bw = 2 * R;
        const bar = (y, frac, label, colour) => {
          c.fillStyle = '#eef0f2';
          c.fillRect(bx, y, bw, 9);
          c.fillStyle = colour;
          c.fillRect(bx, y, bw * clamp(frac, 0, 1), 9);
          text(c, label, bx, y + 22, { colour: MUTED, size: 11 });
        };
        bar(H - 98, d, 'duty ' + fixed(d, 4), rgba(r.colour, 0.75));
        bar(H - 56, Math.abs(i) / 12, 'current ' + fixed(i, 2) + ' A (limit 10 A)', rgba(r.colour, 0.45));
        lineTo(c, bx + bw * (10 / 12), H - 60, bx + bw * (10 / 12), H - 43, LIMIT, 2);
        const load = k * r.h >= r.params[2] ? r.params[1] / 2 : r.params[1];
        text(c, 'load ' + fmt(load) + ' Ω' + (k * r.h >= r.params[2] ? ' (halved)' : ''), bx + bw, H - 76, {
          align: 'right',
          colour: MUTED,
          size: 11,
        });
      }
    },
    status(r, k) {
      return fixed(r.get(k, 0), 3) + ' V, ' + fixed(r.get(k, 1), 2) + ' A, duty ' + fixed(r.get(k, 2), 3);
    },
  };

  const blackHole = {
    height: 400,
    setup(plant) {
      // The angle: the recorded dφ/dτ times the tick, summed (the one derived value).
      for (const r of plant.runs) {
        r.phi = new Float64Array(r.ticks);
        for (let k = 1; k < r.ticks; k++) {
          const w = r.get(k - 1, 2);
          r.phi[k] = r.phi[k - 1] + (Number.isFinite(w) ? w : 0) * r.h;
        }
      }
    },
    draw(c, W, H, P) {
      const target = Math.max(...P.plant.runs.map((r) => r.params[0]));
      const view = Math.max(2.15 * target, 4);
      const cx = Math.min(W * 0.4, H / 2 + 170);
      const cy = H / 2;
      const s = (H / 2 - 14) / view;
      const circle = (rad, colour, width, dash, fill) => {
        c.beginPath();
        c.setLineDash(dash || []);
        c.arc(cx, cy, rad * s, 0, TAU);
        if (fill) {
          c.fillStyle = fill;
          c.fill();
        }
        if (colour) {
          c.strokeStyle = colour;
          c.lineWidth = width;
          c.stroke();
        }
        c.setLineDash([]);
      };
      circle(view, '#e3e6ea', 1, [], '#fbfbfc');
      for (const r0 of new Set(P.plant.runs.map((r) => r.params[0]))) {
        circle(2 * r0, LIMIT, 1, [3, 5]);
        circle(r0, rgba(BAND, 0.5), Math.max(3, 0.02 * r0 * s));
      }
      circle(3, LIMIT, 1.5, [6, 4]);
      circle(2, null, 0, [], '#111');
      const lab = (rad, s2, colour, dy) =>
        text(c, s2, cx - rad * s * 0.7071 - 4, cy - rad * s * 0.7071 + (dy || 0), { align: 'right', colour, size: 11 });
      text(c, 'horizon r = 2', cx, cy + 2 * s + 16, { align: 'center', colour: INK, size: 11 });
      lab(3, 'photon sphere r = 3', LIMIT, -2);
      lab(target, 'target r = ' + fmt(target), '#237a46');
      lab(2 * target, 'lost beyond 2 × target', LIMIT);
      for (const r of P.plant.runs) {
        const k = P.tick(r);
        c.beginPath();
        c.strokeStyle = rgba(r.colour, 0.85);
        c.lineWidth = 1.6;
        for (let j = 0; j <= k; j++) {
          const rad = Math.min(r.get(j, 0), view);
          const x = cx + rad * s * Math.cos(r.phi[j]);
          const y = cy - rad * s * Math.sin(r.phi[j]);
          if (j === 0) c.moveTo(x, y);
          else c.lineTo(x, y);
        }
        c.stroke();
        const rad = Math.min(r.get(k, 0), view);
        c.beginPath();
        c.arc(cx + rad * s * Math.cos(r.phi[k]), cy - rad * s * Math.sin(r.phi[k]), 6, 0, TAU);
        c.fillStyle = r.colour;
        c.fill();
      }
      // Readouts.
      const tx = cx + view * s + 40;
      if (W - tx > 200) {
        for (const r of P.plant.runs) {
          const k = P.tick(r);
          const y = 40 + r.index * 110;
          const rr = r.get(k, 0);
          text(c, r.label, tx, y, { colour: r.colour, weight: '600', size: 13 });
          const where =
            rr <= 2.05
              ? 'captured (frozen at r ≤ 2.05)'
              : rr < 3
                ? 'inside the photon sphere'
                : rr > 2 * r.params[0]
                  ? 'lost'
                  : Math.abs(rr - r.params[0]) <= 0.01 * r.params[0]
                    ? 'in the band'
                    : 'off the band';
          const lines = [
            'r ' + fixed(rr, 4) + ' · ' + where,
            'dr/dτ ' + fixed(r.get(k, 1), 4) + ' · dφ/dτ ' + fixed(r.get(k, 2), 4),
            'far-away time ' + fixed(r.get(k, 3), 1) + ' · fuel ' + fixed(r.get(k, 4), 4),
            'thrust a_r ' + fmt(r.get(k, 6)) + ', a_phi ' + fmt(r.get(k, 7)),
          ];
          lines.forEach((l, n) => text(c, l, tx, y + 20 + n * 18, { colour: MUTED, size: 12, mono: true }));
        }
      }
    },
    status(r, k) {
      return 'r ' + fixed(r.get(k, 0), 3) + ', fuel ' + fixed(r.get(k, 4), 4);
    },
  };

  const rocket = {
    height: 360,
    setup(plant) {
      for (const r of plant.runs) {
        let left = false;
        r.home = -1;
        for (let k = 0; k < r.ticks; k++) {
          if (r.get(k, 0) > 1e-3) left = true;
          else if (left) {
            r.home = k;
            break;
          }
        }
      }
    },
    draw(c, W, H, P) {
      const runs = P.plant.runs;
      let lo = 0;
      let hi = 1;
      let tmax = 1;
      for (const r of runs) {
        for (let k = 0; k < r.ticks; k++) {
          lo = Math.min(lo, r.get(k, 0));
          hi = Math.max(hi, r.get(k, 0));
          tmax = Math.max(tmax, r.get(k, 2));
        }
        tmax = Math.max(tmax, r.params[0] * 1.1);
      }
      const X = (x) => 70 + ((x - lo) / (hi - lo)) * (W - 140);
      const laneTop = 50;
      lineTo(c, X(lo), laneTop + runs.length * 32 + 4, X(hi), laneTop + runs.length * 32 + 4, '#b8c4cf', 1);
      for (const v of ticks(lo, hi, 8)) {
        text(c, fmt(v) + ' ly', X(v), laneTop + runs.length * 32 + 20, { align: 'center', colour: MUTED, size: 10 });
      }
      lineTo(c, X(0), laneTop - 4, X(0), laneTop + runs.length * 32 + 4, '#3b7bd1', 3);
      c.beginPath();
      c.arc(X(0), laneTop + runs.length * 32 + 4, 7, 0, TAU);
      c.fillStyle = '#3b7bd1';
      c.fill();
      text(c, 'Earth', X(0), laneTop - 12, { align: 'center', colour: '#3b7bd1', weight: '600', size: 12 });
      for (const r of runs) {
        const k = P.tick(r);
        const x = X(r.get(k, 0));
        const y = laneTop + r.index * 32 + 8;
        const dir = r.get(k, 1) >= 0 ? 1 : -1;
        c.beginPath();
        c.moveTo(x + 12 * dir, y);
        c.lineTo(x - 8 * dir, y - 7);
        c.lineTo(x - 8 * dir, y + 7);
        c.closePath();
        c.fillStyle = r.colour;
        c.fill();
        if (r.get(k, 6) !== 0 && r.get(k, 4) < r.params[1]) {
          // The exhaust points away from the thrust.
          const a = Math.sign(r.get(k, 6));
          lineTo(c, x - 10 * a, y, x - 22 * a, y, rgba('#b5842a', 0.9), 3);
        }
      }
      // The two clocks of every run against the ordered date.
      const B = (t) => 120 + (clamp(t, 0, tmax) / tmax) * (W - 200);
      const top = laneTop + runs.length * 32 + 62;
      const block = 64;
      const orders = new Set(runs.map((r) => r.params[0]));
      for (const o of orders) {
        c.fillStyle = rgba(BAND, 0.18);
        c.fillRect(B(o * 0.95), top - 4, B(o * 1.05) - B(o * 0.95), runs.length * block);
        lineTo(c, B(o), top - 6, B(o), top + runs.length * block - 4, BAND, 2, [5, 4]);
        text(c, 'ordered date ' + fmt(o) + ' yr (±5 %: score 0.95)', B(o), top - 10, {
          align: 'center',
          colour: '#237a46',
          size: 11,
        });
      }
      for (const r of runs) {
        const k = P.tick(r);
        const y = top + r.index * block + 18;
        const clock = (yy, t, label, alpha) => {
          c.fillStyle = '#eef0f2';
          c.fillRect(B(0), yy, B(tmax) - B(0), 12);
          c.fillStyle = rgba(r.colour, alpha);
          c.fillRect(B(0), yy, B(t) - B(0), 12);
          text(c, label, B(0) - 8, yy + 10, { align: 'right', colour: MUTED, size: 11 });
          text(c, fixed(t, 2) + ' yr', B(t) + 6, yy + 10, { colour: INK, size: 11, mono: true });
        };
        clock(y, r.get(k, 2), "Earth's clock", 0.75);
        clock(y + 18, r.get(k, 3), "ship's clock", 0.4);
        text(
          c,
          r.label + (r.home >= 0 && k >= r.home ? ': home at Earth date ' + fixed(r.get(r.home, 2), 2) + ' yr' : ''),
          14,
          y - 6,
          {
            colour: r.colour,
            weight: '600',
            size: 12,
          },
        );
      }
    },
    status(r, k) {
      const s = 'x ' + fixed(r.get(k, 0), 3) + ' ly, β ' + fixed(r.get(k, 1), 3) + ', fuel ' + fixed(r.get(k, 4), 2);
      return r.home >= 0 && k >= r.home ? s + ' · home at Earth date ' + fixed(r.get(r.home, 2), 2) + ' yr' : s;
    },
  };

  const satClock = {
    height: 300,
    draw(c, W, H, P) {
      const runs = P.plant.runs;
      let m = 1.25;
      for (const r of runs) for (let k = 0; k < r.ticks; k++) m = Math.max(m, Math.abs(r.get(k, 0)) * 1e6 * 1.08);
      m = Math.min(m, 50);
      const L = 64;
      const Rr = W - 200;
      const top = 24;
      const bottom = H - 40;
      const tmax = P.plant.tmax;
      const X = (t) => L + (t / tmax) * (Rr - L);
      const Y = (us) => top + ((m - clamp(us, -m, m)) / (2 * m)) * (bottom - top);
      c.fillStyle = '#fff';
      c.fillRect(L, top, Rr - L, bottom - top);
      const half = P.plant.marks.length ? P.plant.marks[0].t0 : tmax / 2;
      c.fillStyle = rgba(BAND, 0.2);
      c.fillRect(X(half), Y(0.1), X(tmax) - X(half), Y(-0.1) - Y(0.1));
      lineTo(c, X(half), top, X(half), bottom, '#8d959d', 1, [4, 4]);
      text(c, 'scored from here: within 100 ns', X(half) + 6, top + 14, { colour: '#237a46', size: 11 });
      for (const u of [1, -1]) lineTo(c, L, Y(u), Rr, Y(u), LIMIT, 1.5);
      text(c, 'unhealthy beyond ±1 µs (300 m of ranging error)', L + 6, Y(1) - 5, { colour: LIMIT, size: 11 });
      lineTo(c, L, Y(0), Rr, Y(0), '#c3c9cf', 1);
      for (const v of ticks(-m, m, 6))
        text(c, fmt(v) + ' µs', L - 6, Y(v) + 4, { align: 'right', colour: MUTED, size: 10 });
      for (let h = 0; h <= tmax / 3600 + 1e-9; h += 3)
        text(c, h + ' h', X(h * 3600), bottom + 16, { align: 'center', colour: MUTED, size: 10 });
      for (const r of runs) {
        const k = P.tick(r);
        c.beginPath();
        c.strokeStyle = r.colour;
        c.lineWidth = 1.8;
        for (let j = 0; j <= k; j++) {
          const x = X(j * r.h);
          const y = Y(r.get(j, 0) * 1e6);
          if (j === 0) c.moveTo(x, y);
          else c.lineTo(x, y);
        }
        c.stroke();
        const e = r.get(k, 0);
        c.beginPath();
        c.arc(X(k * r.h), Y(e * 1e6), 5, 0, TAU);
        c.fillStyle = r.colour;
        c.fill();
        const y = top + 20 + r.index * 60;
        text(c, r.label, Rr + 16, y, { colour: r.colour, weight: '600', size: 12 });
        text(c, fixed(e * 1e9, 1) + ' ns', Rr + 16, y + 18, { size: 13, mono: true });
        text(c, '≈ ' + fixed(Math.abs(e) * 299792458, 1) + ' m of range', Rr + 16, y + 34, { colour: MUTED, size: 11 });
      }
    },
    status(r, k) {
      return (
        'recorded error ' + fixed(r.get(k, 0) * 1e9, 1) + ' ns, correction ' + fixed(r.get(k, 2) * 1e9, 3) + ' ns/s'
      );
    },
  };

  /** The slits' match: the cosine similarity of the pattern and the target at tick k. */
  function match(r, k) {
    let dot = 0;
    let pp = 0;
    let tt = 0;
    for (let j = 0; j < 64; j++) {
      const a = r.get(k, j);
      const b = r.get(k, 64 + j);
      dot += a * b;
      pp += a * a;
      tt += b * b;
    }
    const n = Math.sqrt(pp * tt);
    return n > 0 ? dot / n : 0;
  }

  const screenX = (j) => (j - 31.5) * 6.25;

  const slits = {
    height: 360,
    draw(c, W, H, P) {
      const runs = P.plant.runs;
      const L = 56;
      const Rr = W - 20;
      const top = 24;
      const bottom = 220;
      const X = (x) => L + ((x + 200) / 400) * (Rr - L);
      const Y = (v) => bottom - (clamp(v, 0, 1.1) / 1.1) * (bottom - top);
      c.fillStyle = '#fff';
      c.fillRect(L, top, Rr - L, bottom - top);
      for (const v of [0, 0.5, 1]) {
        lineTo(c, L, Y(v), Rr, Y(v), '#e6e9ec', 1);
        text(c, String(v), L - 6, Y(v) + 4, { align: 'right', colour: MUTED, size: 10 });
      }
      for (const x of [-200, -100, 0, 100, 200])
        text(c, x + ' λ', X(x), bottom + 15, { align: 'center', colour: MUTED, size: 10 });
      text(c, 'screen intensity over its maximum (solid) against the target (dashed), by screen position', L, top - 8, {
        colour: MUTED,
        size: 11,
      });
      const path = (r, k, off, colour, width, dash) => {
        c.beginPath();
        c.setLineDash(dash || []);
        for (let j = 0; j < 64; j++) {
          const x = X(screenX(j));
          const y = Y(r.get(k, off + j));
          if (j === 0) c.moveTo(x, y);
          else c.lineTo(x, y);
        }
        c.strokeStyle = colour;
        c.lineWidth = width;
        c.stroke();
        c.setLineDash([]);
      };
      for (const r of runs) path(r, P.tick(r), 64, '#444b52', 1.5, [6, 4]);
      for (const r of runs) path(r, P.tick(r), 0, r.colour, 2.2);
      // The mask: sixteen cells per run, coloured by phase.
      const cw = Math.min(40, (W - 260) / 16);
      for (const r of runs) {
        const k = P.tick(r);
        const y = bottom + 34 + r.index * 46;
        text(c, r.label, 14, y + 15, { colour: r.colour, weight: '600', size: 12 });
        for (let n = 0; n < 16; n++) {
          const ph = r.get(k, 128 + n);
          const hue = ((((ph % TAU) + TAU) % TAU) / TAU) * 360;
          c.fillStyle = 'hsl(' + hue.toFixed(0) + ', 65%, 60%)';
          c.fillRect(150 + n * cw, y, cw - 2, 22);
        }
        text(c, 'match ' + fixed(match(r, k), 4), 150 + 16 * cw + 12, y + 15, { size: 13, mono: true });
      }
      text(c, 'mask phases (hue: phase mod 2π)', 150, H - 6, { colour: MUTED, size: 11 });
    },
    status(r, k) {
      return 'match ' + fixed(match(r, k), 4);
    },
  };

  const ANIMATIONS = {
    cartpole: cartPole(false),
    'cartpole-swingup': cartPole(true),
    shower,
    ship,
    buck,
    blackhole: blackHole,
    rocket,
    satclock: satClock,
    slits,
  };

  // ---------------------------------------------------------------- charts

  const CW = 420;
  const CH = 190;
  const M = { l: 50, r: 10, t: 10, b: 24 };

  /** The range to chart: the data, limits close to it, at most the view. */
  function yRange(values, limits, view) {
    let lo = Infinity;
    let hi = -Infinity;
    for (const v of values) {
      if (Number.isFinite(v)) {
        if (v < lo) lo = v;
        if (v > hi) hi = v;
      }
    }
    if (view) {
      lo = Math.max(lo, view[0]);
      hi = Math.min(hi, view[1]);
    }
    if (!(lo <= hi)) {
      lo = view ? view[0] : -1;
      hi = view ? view[1] : 1;
    }
    const span = Math.max(hi - lo, Math.abs(hi), Math.abs(lo), 1e-300);
    const reach = (l) => (l.kind === 'clamp' ? 0.5 : 4) * span;
    for (const l of limits) {
      for (const v of [l.lo, l.hi]) {
        if (v >= lo - reach(l) && v <= hi + reach(l) && (!view || (v >= view[0] && v <= view[1]))) {
          lo = Math.min(lo, v);
          hi = Math.max(hi, v);
        }
      }
    }
    if (hi - lo < 1e-12 * Math.max(1, Math.abs(hi))) {
      const d = Math.abs(hi) * 0.1 || 1;
      lo -= d;
      hi += d;
    }
    const pad = (hi - lo) * 0.06;
    return [lo - pad, hi + pad];
  }

  /**
   * One chart as SVG: series over time with limits, time marks and a playhead.
   * Returns the element and a function that moves the playhead.
   */
  function chart(host, spec) {
    const div = document.createElement('div');
    div.className = 'chart' + (spec.wide ? ' wide' : '');
    const W = spec.wide ? CW * 3 : CW;
    const all = [];
    for (const s of spec.series) for (const v of s.ys) all.push(v);
    const [lo, hi] = yRange(all, spec.limits, spec.view);
    const xmax = spec.xmax;
    const X = (x) => M.l + (x / xmax) * (W - M.l - M.r);
    const Y = (y) => M.t + ((hi - y) / (hi - lo)) * (CH - M.t - M.b);
    let clipped = false;
    const parts = [];
    parts.push(
      '<rect x="' +
        M.l +
        '" y="' +
        M.t +
        '" width="' +
        (W - M.l - M.r) +
        '" height="' +
        (CH - M.t - M.b) +
        '" fill="#fff" stroke="#e1e4e8"/>',
    );
    for (const m of spec.marks) {
      const x0 = X(m.t0);
      if (m.t1 !== null && m.t1 !== undefined) {
        parts.push(
          '<rect x="' +
            x0.toFixed(1) +
            '" y="' +
            M.t +
            '" width="' +
            Math.max(1, X(m.t1) - x0).toFixed(1) +
            '" height="' +
            (CH - M.t - M.b) +
            '" fill="rgba(181,132,42,0.12)"/>',
        );
      } else {
        parts.push(
          '<line x1="' +
            x0.toFixed(1) +
            '" x2="' +
            x0.toFixed(1) +
            '" y1="' +
            M.t +
            '" y2="' +
            (CH - M.b) +
            '" stroke="#8d959d" stroke-dasharray="3 3"/>',
        );
      }
      parts.push(
        '<text class="mark-label" x="' +
          (x0 + 3).toFixed(1) +
          '" y="' +
          (CH - M.b - 4) +
          '">' +
          esc(m.label) +
          '</text>',
      );
    }
    const offScale = [];
    for (const l of spec.limits) {
      if (l.kind === 'band') {
        const a = clamp(Y(l.hi), M.t, CH - M.b);
        const b = clamp(Y(l.lo), M.t, CH - M.b);
        if (b - a > 0.2 || (l.hi >= lo && l.lo <= hi)) {
          parts.push(
            '<rect x="' +
              M.l +
              '" y="' +
              a.toFixed(1) +
              '" width="' +
              (W - M.l - M.r) +
              '" height="' +
              Math.max(1.5, b - a).toFixed(1) +
              '" fill="rgba(46,158,91,0.16)"/>',
          );
          if (l.label)
            parts.push(
              '<text class="band-label" x="' +
                (M.l + 4) +
                '" y="' +
                (a - 3).toFixed(1) +
                '">' +
                esc(l.label) +
                '</text>',
            );
        }
        continue;
      }
      if (l.lo < lo || l.lo > hi) {
        if (l.label && l.kind !== 'clamp') offScale.push((l.lo > hi ? '▲ ' : '▼ ') + l.label);
        continue;
      }
      const y = Y(l.lo).toFixed(1);
      const colour = l.kind === 'limit' ? LIMIT : l.kind === 'target' ? BAND : CLAMP;
      const dash = l.kind === 'limit' ? '' : ' stroke-dasharray="5 4"';
      parts.push(
        '<line x1="' +
          M.l +
          '" x2="' +
          (W - M.r) +
          '" y1="' +
          y +
          '" y2="' +
          y +
          '" stroke="' +
          colour +
          '" stroke-width="1.3"' +
          dash +
          '/>',
      );
      if (l.label) {
        const cls = l.kind === 'limit' ? 'limit-label' : l.kind === 'target' ? 'band-label' : 'clamp-label';
        const below = Y(l.lo) < M.t + 14;
        parts.push(
          '<text class="' +
            cls +
            '" text-anchor="end" x="' +
            (W - M.r - 4) +
            '" y="' +
            (below ? Y(l.lo) + 12 : Y(l.lo) - 4).toFixed(1) +
            '">' +
            esc(l.label) +
            '</text>',
        );
      }
    }
    for (const v of ticks(lo, hi, 4)) {
      const y = Y(v).toFixed(1);
      parts.push('<line x1="' + (M.l - 4) + '" x2="' + M.l + '" y1="' + y + '" y2="' + y + '" stroke="#9aa3ab"/>');
      parts.push(
        '<text text-anchor="end" x="' + (M.l - 6) + '" y="' + (Number(y) + 3.5) + '">' + esc(fmt(v)) + '</text>',
      );
    }
    for (const v of ticks(0, xmax, spec.wide ? 10 : 5)) {
      const x = X(v).toFixed(1);
      parts.push(
        '<line x1="' + x + '" x2="' + x + '" y1="' + (CH - M.b) + '" y2="' + (CH - M.b + 4) + '" stroke="#9aa3ab"/>',
      );
      parts.push('<text text-anchor="middle" x="' + x + '" y="' + (CH - M.b + 15) + '">' + esc(fmt(v)) + '</text>');
    }
    for (const s of spec.series) {
      let d = '';
      let pen = false;
      let prev = null;
      for (let k = 0; k < s.ys.length; k++) {
        const v = s.ys[k];
        if (!Number.isFinite(v)) {
          pen = false;
          continue;
        }
        if (v < lo || v > hi) clipped = true;
        if (spec.wrap && prev !== null && Math.abs(v - prev) > 180) pen = false;
        prev = v;
        d += (pen ? 'L' : 'M') + X(s.xs[k]).toFixed(1) + ' ' + Y(clamp(v, lo, hi)).toFixed(1);
        pen = true;
      }
      parts.push(
        '<path d="' +
          d +
          '" fill="none" stroke="' +
          s.colour +
          '" stroke-width="1.5"' +
          (s.dash ? ' stroke-dasharray="5 3"' : '') +
          ' stroke-linejoin="round"/>',
      );
    }
    offScale.forEach((t, n) =>
      parts.push(
        '<text class="limit-label" x="' +
          (M.l + 4) +
          '" y="' +
          (M.t + 11 + n * 12) +
          '">' +
          esc(t) +
          ' (off scale)</text>',
      ),
    );
    if (spec.playhead !== false)
      parts.push(
        '<line class="playhead" x1="' +
          M.l +
          '" x2="' +
          M.l +
          '" y1="' +
          M.t +
          '" y2="' +
          (CH - M.b) +
          '" stroke="#1d232b" stroke-width="1" stroke-opacity="0.55"/>',
      );
    div.innerHTML =
      '<p class="title"><span class="t">' +
      spec.title +
      (clipped ? ' <span class="note">· clipped</span>' : '') +
      '</span></p>' +
      '<svg viewBox="0 0 ' +
      W +
      ' ' +
      CH +
      '" role="img" aria-label="' +
      esc(spec.label) +
      '">' +
      parts.join('') +
      '</svg>' +
      '<div class="tip"></div>';
    host.appendChild(div);
    const head = div.querySelector('.playhead');
    const svg = div.querySelector('svg');
    const tip = div.querySelector('.tip');
    const move = (x) => {
      if (!head) return;
      const px = clamp(X(x), M.l, W - M.r).toFixed(1);
      head.setAttribute('x1', px);
      head.setAttribute('x2', px);
    };
    if (spec.hover) {
      const at = (e) => {
        const box = svg.getBoundingClientRect();
        const vx = ((e.clientX - box.left) / box.width) * W;
        return clamp(((vx - M.l) / (W - M.l - M.r)) * xmax, 0, xmax);
      };
      svg.addEventListener('mousemove', (e) => {
        const x = at(e);
        tip.innerHTML = spec.hover(x);
        tip.style.display = 'block';
        const box = div.getBoundingClientRect();
        const left = e.clientX - box.left + 14;
        tip.style.left = Math.max(0, Math.min(left, box.width - tip.offsetWidth - 4)) + 'px';
        tip.style.top = e.clientY - box.top + 18 + 'px';
      });
      svg.addEventListener('mouseleave', () => (tip.style.display = 'none'));
      if (spec.seek) svg.addEventListener('click', (e) => spec.seek(at(e)));
    }
    return move;
  }

  function charts(plant, host, player) {
    const ts = plant.time.scale;
    const tunit = plant.time.shown;
    const xmax = plant.tmax * ts || 1;
    const marks = plant.marks.map((m) => ({ t0: m.t0 * ts, t1: m.t1 === null ? null : m.t1 * ts, label: m.label }));
    const seek = (x) => {
      player.pause();
      player.seek(x / ts / plant.hmin);
    };
    const hoverRows = (x, value) =>
      '<b>' +
      esc(clockText(plant, Math.round(x / ts / plant.hmin) * plant.hmin)) +
      '</b><br>' +
      plant.runs
        .map((r) => {
          const k = clamp(Math.round(x / ts / r.h), 0, r.ticks - 1);
          return '<span class="k c' + (r.index % 6) + '">' + esc(r.label) + '</span>: ' + esc(value(r, k));
        })
        .join('<br>');
    const watch = (move) => player.watchers.push((t) => move(t * ts));
    const add = (spec) => watch(chart(host, Object.assign({ xmax, marks, hover: null, seek }, spec)));

    if (plant.plant === 'slits') {
      // The match per tick (derived, as the scoring computes it), then the final
      // screen pattern against the target, then every phase.
      add({
        title: '<b>match</b> with the target, tick by tick (the cosine similarity the score uses)',
        label: 'match per tick',
        wide: true,
        series: plant.runs.map((r) => ({
          colour: r.colour,
          xs: Array.from({ length: r.ticks }, (_, k) => k * r.h * ts),
          ys: Array.from({ length: r.ticks }, (_, k) => match(r, k)),
        })),
        limits: [{ kind: 'limit', lo: 0.95, hi: 0.95, label: 'floor 0.95' }],
        view: [0, 1.05],
        hover: (x) => hoverRows(x, (r, k) => fixed(match(r, k), 4)),
      });
      chart(host, {
        playhead: false,
        title:
          '<b>screen</b> after the last answer: intensity_0 … intensity_63 (solid) against target_0 … target_63 (dashed)',
        label: 'final screen pattern',
        wide: true,
        xmax: 63,
        marks: [],
        series: plant.runs.flatMap((r) => [
          {
            colour: r.colour,
            xs: Array.from({ length: 64 }, (_, j) => j),
            ys: Array.from({ length: 64 }, (_, j) => r.get(r.ticks - 1, j)),
          },
          {
            colour: '#444b52',
            dash: true,
            xs: Array.from({ length: 64 }, (_, j) => j),
            ys: Array.from({ length: 64 }, (_, j) => r.get(r.ticks - 1, 64 + j)),
          },
        ]),
        limits: [],
        view: [0, 1.1],
      });
    }
    for (const ch of plant.channels) {
      if (ch.group) continue;
      const scale = ch.scale;
      const disp = (v) => (ch.wrap ? wrap180(v * scale) : v * scale);
      const limits = plant
        .limitsOf(ch.col)
        .map((l) => ({ kind: l.kind, lo: l.lo * scale, hi: l.hi * scale, label: l.label }));
      const unit = ch.shown
        ? ' (' + esc(ch.shown) + (ch.shown !== ch.unit && ch.unit ? ', recorded in ' + esc(ch.unit) : '') + ')'
        : '';
      add({
        title:
          '<b>' +
          esc(ch.name) +
          '</b> · ' +
          esc(ch.what) +
          unit +
          (ch.wrap ? ', wrapped to ±180°' : '') +
          (ch.input ? ' · <i>input</i>' : ''),
        label: ch.name + ' against ' + plant.time.label,
        series: plant.runs.map((r) => ({
          colour: r.colour,
          xs: Array.from({ length: r.ticks }, (_, k) => k * r.h * ts),
          ys: Array.from({ length: r.ticks }, (_, k) => disp(r.get(k, ch.col))),
        })),
        limits,
        view: ch.view,
        wrap: ch.wrap,
        hover: (x) => hoverRows(x, (r, k) => fmt(disp(r.get(k, ch.col))) + (ch.shown ? ' ' + ch.shown : '')),
      });
    }
    const axis = document.createElement('p');
    axis.className = 'note wide';
    axis.textContent =
      'Horizontal axes: ' +
      plant.time.label +
      (plant.time.label.includes(tunit) ? '' : ' (' + tunit + ')') +
      '. Red: a limit the scoring fails on; green: the band or target it scores; ' +
      'grey dashed: where the plant clamps an input. Hover a chart for the values; click it to move the replay there.';
    host.insertBefore(axis, host.firstChild);
  }

  // ---------------------------------------------------------------- start

  function start() {
    for (const plant of DATA.plants) {
      prepare(plant);
      const host = document.querySelector('.replay[data-plant="' + plant.plant + '"]');
      const chartHost = document.querySelector('.charts[data-plant="' + plant.plant + '"]');
      const anim = ANIMATIONS[plant.plant];
      if (!host || !chartHost || !anim) throw new Error('no place for ' + plant.plant);
      const p = new Player(plant, host, anim);
      players.push(p);
      charts(plant, chartHost, p);
      p.seek(0);
    }
    let pending = false;
    window.addEventListener('resize', () => {
      if (pending) return;
      pending = true;
      requestAnimationFrame(() => {
        pending = false;
        players.forEach((p) => p.resize());
      });
    });
    const still = window.matchMedia && window.matchMedia('(prefers-reduced-motion: reduce)').matches;
    if (!still) players.forEach((p) => p.play());
    requestAnimationFrame(frame);
  }

  try {
    start();
    root.setAttribute('data-replay', 'ready');
  } catch (e) {
    root.setAttribute('data-replay', 'error');
    const p = document.createElement('p');
    p.id = 'replay-error';
    p.className = 'fail';
    p.textContent = 'The replay could not be drawn: ' + (e && e.message ? e.message : String(e));
    document.querySelector('main').prepend(p);
  }
})();
