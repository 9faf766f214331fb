// Cart-pole swing-up, the same law as accepted.c: pump the pole's energy up to the
// upright value, then catch it with linear feedback near upright.
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
    u = kE * (energy - eUp) * direction - kx * x - kv * v;
  }
  if (u > 20) u = 20;
  if (u < -20) u = -20;
  process.stdout.write(u + '\n');
});
