// Buck converter, the same law as accepted.c: a voltage PI loop sets a current
// reference limited to -2..6 A, a current PI loop sets the duty cycle; the
// reference ramps to 5 V over 3 ms.
const { createInterface } = require('readline');

const ref = 5, h = 1e-5, ramp = 0.003, iMax = 6, kpv = 1.0, kiv = 5000, kci = 0.2, kii = 2000;
let t = 0, vInt = 0, dInt = 0;

createInterface({ input: process.stdin }).on('line', (line) => {
  const [v, i] = line.split('|')[0].trim().split(' ').map(Number);
  const target = t < ramp ? ref * (t / ramp) : ref;
  const e = target - v;
  let iRef = kpv * e + kiv * vInt;
  if (iRef > -2 && iRef < iMax) vInt = vInt + e * h;
  if (iRef > iMax) iRef = iMax;
  if (iRef < -2) iRef = -2;
  const ei = iRef - i;
  let u = kci * ei + dInt;
  if (u >= 0 && u <= 1) dInt = dInt + kii * ei * h;
  if (u < 0) u = 0;
  if (u > 1) u = 1;
  t = t + h;
  process.stdout.write(u + '\n');
});
