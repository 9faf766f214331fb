// Black hole: hold the probe on the circular orbit at r_target = 5 (inside the
// innermost stable orbit at r = 6, where a circular orbit sits on top of the
// effective-potential hill and is unstable: left alone, a displacement grows as
// e^(0.063 tau)). A PD law on the radial thrust supplies the stiffness gravity does
// not: 0.044 per unit of displacement against the hill's 0.004, so the net radial
// frequency is 0.2 per unit of proper time, critically damped by 0.4 of the radial
// speed. It cancels the outward kick, settles, then spends almost nothing.
const { createInterface } = require('readline');

const kp = 0.044, kd = 0.4;

createInterface({ input: process.stdin }).on('line', (line) => {
  const [r, v, , , , target] = line.split('|')[0].trim().split(' ').map(Number);
  const aR = -kp * (r - target) - kd * v;
  process.stdout.write(aR + ' 0\n');
});
