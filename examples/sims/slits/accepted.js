// Double slit: start from a lens, the cell phases that bring every cell's waves to
// the target's centroid in step, then trim the cells one at a time against the
// hidden phase defect, measuring the match (the cosine of the screen pattern with
// the target) on the screen itself. For each cell: one tick with its phase +1 rad,
// one with -1 rad; with the current setting these three matches fix the sinusoid
// a + b cos d + c sin d the match follows near its optimum, and the cell moves to
// its peak, d = atan2(c, b). Sixteen cells take 48 ticks; the sweeps repeat, and the
// last 9 ticks of the default 200-tick run hold the best phases seen. No Jacobian.
const { createInterface } = require('readline');

const ncell = 16, nscr = 64, L = 2000, k = 2 * Math.PI, d = 1, ticks = 200, hold = 8;
let phase = null, last = null, best = -1, bestPhase = null, tick = 0;
const m = [0, 0];

function match(obs) {
  let dot = 0, pp = 0, tt = 0;
  for (let j = 0; j < nscr; j++) {
    const p = obs[j], t = obs[nscr + j];
    dot = dot + p * t; pp = pp + p * p; tt = tt + t * t;
  }
  return dot / Math.sqrt(pp * tt);
}

createInterface({ input: process.stdin }).on('line', (line) => {
  const obs = line.split('|')[0].trim().split(' ').map(Number);
  if (phase === null) {
    let sw = 0, sx = 0;
    for (let j = 0; j < nscr; j++) { sw = sw + obs[nscr + j]; sx = sx + (j - 31.5) * 6.25 * obs[nscr + j]; }
    const x0 = sx / sw;
    phase = [];
    for (let n = 0; n < ncell; n++) phase.push(-k * (Math.sqrt(L * L + (x0 - (n - 7.5) * 4) ** 2) - L));
  }
  const now = match(obs);
  if (last !== null && now > best) { best = now; bestPhase = last; }
  const step = tick % 3, cell = Math.floor(tick / 3) % ncell;
  let out = phase.slice();
  if (tick >= ticks - hold - 1) out = bestPhase;
  else if (step < 2) { m[step] = now; out[cell] = out[cell] + (step === 0 ? d : -d); }
  else {
    const c = (m[1] - now) / (2 * Math.sin(d)), b = (m[0] - (m[1] + now) / 2) / (1 - Math.cos(d));
    phase[cell] = phase[cell] + Math.atan2(c, b);
    out = phase.slice();
  }
  last = out; tick = tick + 1;
  process.stdout.write(out.join(' ') + '\n');
});
