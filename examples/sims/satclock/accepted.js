// Satellite clock: cancel the known relativistic rate (38.6 us a day, as navigation
// clocks are offset before launch), then PI on the measured error for what is left
// (the oscillator's own offset, the eccentric-orbit wobble). The ground's measurement
// is 600 s old, so the loop is kept slow: the proportional gain of 1e-3 per second
// puts the crossover near 1e-3 rad/s, where the six-stage delay costs only about 35
// degrees of phase, and the integral gain (2e-7 per s^2) corner sits five times lower.
const { createInterface } = require('readline');

const rateGr = 38.6e-6 / 86400, h = 30, kp = 1e-3, ki = 2e-7;
let integral = 0;

createInterface({ input: process.stdin }).on('line', (line) => {
  const [error] = line.split('|')[0].trim().split(' ').map(Number);
  const u = -rateGr - kp * error - integral;
  integral = integral + ki * error * h;
  process.stdout.write(u + '\n');
});
