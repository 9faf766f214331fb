// A first draft: proportional control of the voltage alone, with no current loop
// and no ramp. At start-up the duty cycle saturates at 1 and the inductor current
// overshoots past the 10 A limit.
#define REFERENCE 5.0
#define GAIN 2.0

__attribute__((export_name("control")))
double control(double v, double i, int k) {
    (void)i;
    (void)k;
    double u = GAIN * (REFERENCE - v);
    if (u < 0) u = 0;
    if (u > 1) u = 1;
    return u;
}
