// Shower: PI control of the head temperature toward 38 C, the middle of the 37..39 C
// comfort band. The water takes about 4.5 s to reach the head (0.5 s valve, 3 s of
// pipe, 1 s head), so the gains are low: the integrator opens the valve over some
// ten seconds instead of slamming it, and is frozen while the command is pinned at
// 0 or 1 in the direction of the error (no wind-up). It also pulls the head back
// down after the toilet flush makes the mix hotter.
const { createInterface } = require('readline');

const target = 38, h = 0.1, kp = 0.01, ki = 0.004;
let integral = 0;

createInterface({ input: process.stdin }).on('line', (line) => {
  const [tHead] = line.split('|')[0].trim().split(' ').map(Number);
  const e = target - tHead;
  let u = kp * e + integral;
  if ((u > 0 || e > 0) && (u < 1 || e < 0)) integral = integral + ki * e * h;
  if (u < 0) u = 0;
  if (u > 1) u = 1;
  process.stdout.write(u + '\n');
});
