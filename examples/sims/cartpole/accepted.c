// Cart-pole balance, the same law as accepted.js: linear state feedback on the
// pole's angle and rate and the cart's position and speed. Compile for the judge with
//   clang --target=wasm32-wasi -mexec-model=reactor -O2 -ffp-contract=off -Wall -Werror -o controller.wasm accepted.c
#define ANGLE_GAIN 40.0
#define RATE_GAIN 5.0
#define POSITION_GAIN 1.0
#define SPEED_GAIN 1.0

__attribute__((export_name("control")))
double control(double x, double v, double theta, double omega, int k) {
    (void)k;
    return ANGLE_GAIN * theta + RATE_GAIN * omega + POSITION_GAIN * x + SPEED_GAIN * v;
}
