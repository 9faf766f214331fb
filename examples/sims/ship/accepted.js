// Ship: PD heading control. The rudder is ordered in proportion to the heading
// error, less a yaw-rate term that starts easing the helm well before the ship
// reaches the ordered 30 degrees: the hull keeps turning for a time constant of
// 20 s after the rudder is centred, and the rudder itself lags 2 s and slews at
// only 3 degrees a second, so without that damping the ship swings past the course.
// Gains: 1.5 rad of rudder per rad of error, 15 s of yaw-rate damping (the command
// is clamped to 35 degrees by the rudder stop).
const { createInterface } = require('readline');

const order = 30 * Math.PI / 180, kp = 1.5, kd = 15;

createInterface({ input: process.stdin }).on('line', (line) => {
  const [heading, yawRate] = line.split('|')[0].trim().split(' ').map(Number);
  const u = kp * (order - heading) - kd * yawRate;
  process.stdout.write(u + '\n');
});
