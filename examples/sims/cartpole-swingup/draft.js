// A first draft of the swing-up, the same law as draft.c: the accepted law with the
// cart's position and speed terms in the pump added instead of subtracted. They are
// meant to brake the cart and bring it back to the middle of the track while it
// pumps; with the wrong sign they push it on, harder the further and faster it goes
// (positive feedback). The first push swings the pole half-way up, but the cart
// never brakes: it leaves the 2.4 m track at 0.51 s, still at full force. Off track.
const { createInterface } = require('readline');

const m = 0.1, g = 9.81, l = 0.5;
const kE = 60, kx = 2, kv = 3, kp = 40, kd = 5, kxb = 1, kvb = 1;
const eUp = m * g * l;
let catching = false;

// The angle from upright in (-pi, pi].
function wrap(a) {
  let w = (a + Math.PI) % (2 * Math.PI);
  if (w < 0) w = w + 2 * Math.PI;
  return w - Math.PI;
}

createInterface({ input: process.stdin }).on('line', (line) => {
  const [x, v, theta, omega] = line.split('|')[0].trim().split(' ').map(Number);
  const near = wrap(theta);
  const c = Math.cos(theta);
  if (!catching && c > 0.9 && Math.abs(omega) < 3.5) catching = true;
  if (catching && c < 0.3) catching = false;
  let u;
  if (catching) {
    u = kp * near + kd * omega + kxb * x + kvb * v;
  } else {
    const energy = (2 / 3) * m * l * l * omega * omega + m * g * l * c;
    const direction = omega * c >= 0 ? 1 : -1;
    u = kE * (energy - eUp) * direction + kx * x + kv * v;
  }
  if (u > 20) u = 20;
  if (u < -20) u = -20;
  process.stdout.write(u + '\n');
});
