// Buck converter: a voltage loop (PI, with anti-windup) sets a current reference
// limited to -2..6 A; a current loop (PI, with anti-windup) sets the duty cycle.
// The reference ramps from 0 to 5 V over 3 ms. No library call, so the C, the
// JavaScript and the Rust forms give the same bits. Compile for the judge with
//   clang --target=wasm32-wasi -mexec-model=reactor -O2 -ffp-contract=off -Wall -Werror -o controller.wasm accepted.c

#define REFERENCE 5.0
#define TICK 1e-5
#define RAMP 0.003
#define CURRENT_MAX 6.0
#define CURRENT_MIN -2.0
#define VOLTAGE_P 1.0
#define VOLTAGE_I 5000.0
#define CURRENT_P 0.2
#define CURRENT_I 2000.0

static double t = 0, voltage_integral = 0, duty_integral = 0;

__attribute__((export_name("control")))
double control(double v, double i, int k) {
    (void)k;
    double target = (t < RAMP) ? REFERENCE * (t / RAMP) : REFERENCE;
    double e = target - v;
    double current_ref = VOLTAGE_P * e + VOLTAGE_I * voltage_integral;
    if (current_ref > CURRENT_MIN && current_ref < CURRENT_MAX) voltage_integral = voltage_integral + e * TICK;
    if (current_ref > CURRENT_MAX) current_ref = CURRENT_MAX;
    if (current_ref < CURRENT_MIN) current_ref = CURRENT_MIN;
    double ei = current_ref - i;
    double u = CURRENT_P * ei + duty_integral;
    if (u >= 0 && u <= 1) duty_integral = duty_integral + CURRENT_I * ei * TICK;
    if (u < 0) u = 0;
    if (u > 1) u = 1;
    t = t + TICK;
    return u;
}
