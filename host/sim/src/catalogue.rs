//! The plants a simulation run can name, their components, default tick and stop
//! time, published scenarios, and the module-run models.

use std::fmt;

/// A plant a simulation run names: the component it runs and the task it is judged on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PlantName {
    /// Balance the cart-pole from a small angle (the original's oracle).
    CartPole,
    /// Swing the hanging pole up and hold it.
    CartPoleSwingUp,
    /// Hold a shower's head temperature through a pipe delay and a toilet flush.
    Shower,
    /// Hold a ship on an ordered heading through waves.
    Ship,
    /// Regulate a buck converter's output to 5 V through a load step.
    Buck,
    /// Hold a circular orbit inside a black hole's innermost stable orbit.
    BlackHole,
    /// Fly a relativistic rocket home by an ordered Earth date.
    Rocket,
    /// Steer a navigation satellite's clock through a delayed measurement.
    SatClock,
    /// Shape a double-slit screen pattern through a hidden phase defect.
    Slits,
}

/// A named parameter set of a plant.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scenario {
    /// `s1`, `s2`, ...
    pub name: &'static str,
    /// p0, p1, p2.
    pub params: [f64; 3],
}

/// A scenario literal (promoted to a constant, so `scenarios` can return it).
macro_rules! s {
    ($name:literal, $params:expr) => {
        Scenario { name: $name, params: $params }
    };
}

impl PlantName {
    /// Every plant, in the order the docs list them.
    pub const ALL: [PlantName; 9] = [
        PlantName::CartPole,
        PlantName::CartPoleSwingUp,
        PlantName::Shower,
        PlantName::Ship,
        PlantName::Buck,
        PlantName::BlackHole,
        PlantName::Rocket,
        PlantName::SatClock,
        PlantName::Slits,
    ];

    /// The name on the command line and in summaries.
    pub fn as_str(self) -> &'static str {
        match self {
            PlantName::CartPole => "cartpole",
            PlantName::CartPoleSwingUp => "cartpole-swingup",
            PlantName::Shower => "shower",
            PlantName::Ship => "ship",
            PlantName::Buck => "buck",
            PlantName::BlackHole => "blackhole",
            PlantName::Rocket => "rocket",
            PlantName::SatClock => "satclock",
            PlantName::Slits => "slits",
        }
    }

    /// Reads a plant name.
    ///
    /// # Errors
    ///
    /// `unknown plant "x": the plants are cartpole, ...`.
    pub fn parse(name: &str) -> Result<PlantName, String> {
        PlantName::ALL.into_iter().find(|p| p.as_str() == name).ok_or_else(|| {
            let all: Vec<&str> = PlantName::ALL.iter().map(|p| p.as_str()).collect();
            format!("unknown plant {:?}: the plants are {}", crate::controller::shorten(name), all.join(", "))
        })
    }

    /// The component that simulates it.
    pub fn component(self) -> PlantComponentName {
        match self {
            PlantName::CartPole | PlantName::CartPoleSwingUp => PlantComponentName::CartPole,
            PlantName::Shower => PlantComponentName::Shower,
            PlantName::Ship => PlantComponentName::Ship,
            PlantName::Buck => PlantComponentName::Buck,
            PlantName::BlackHole => PlantComponentName::BlackHole,
            PlantName::Rocket => PlantComponentName::Rocket,
            PlantName::SatClock => PlantComponentName::SatClock,
            PlantName::Slits => PlantComponentName::Slits,
        }
    }

    /// The default tick and stop time, in the plant's time unit.
    pub fn timing(self) -> (f64, f64) {
        match self {
            PlantName::CartPole | PlantName::CartPoleSwingUp => (0.01, 20.0),
            PlantName::Shower => (0.1, 90.0),
            PlantName::Ship => (0.5, 300.0),
            PlantName::Buck => (1e-5, 0.02),
            PlantName::BlackHole => (1.0, 600.0),
            PlantName::Rocket => (0.05, 30.0),
            PlantName::SatClock => (30.0, 86400.0),
            PlantName::Slits => (1.0, 200.0),
        }
    }

    /// The published scenarios; the first is the default.
    #[allow(clippy::approx_constant, reason = "3.14159 is the published scenario's start angle, not pi")]
    pub fn scenarios(self) -> &'static [Scenario] {
        match self {
            PlantName::CartPole => &[s!("s1", [0.2, 0.5, 1.0])],
            PlantName::CartPoleSwingUp => &[
                s!("s1", [3.14159, 0.5, 1.0]),
                s!("s2", [3.0, 0.5, 1.0]),
                s!("s3", [3.3, 0.5, 1.2]),
                s!("s4", [3.14159, 0.5, 0.8]),
            ],
            PlantName::Shower => &[s!("s1", [3.0, 60.0, 40.0])],
            PlantName::Ship => &[s!("s1", [0.2, 20.0, 0.002])],
            PlantName::Buck => &[
                s!("s1", [12.0, 4.0, 0.01]),
                s!("s2", [10.0, 8.0, 0.006]),
                s!("s3", [16.0, 2.0, 0.012]),
                s!("s4", [14.0, 4.0, 0.015]),
            ],
            PlantName::BlackHole => &[s!("s1", [5.0, 0.02, 0.02])],
            PlantName::Rocket => &[s!("s1", [40.0, 14.0, 1.0])],
            PlantName::SatClock => &[s!("s1", [0.02, 1e-10, 600.0])],
            PlantName::Slits => &[s!("s1", [1.0, 60.0, 1.5])],
        }
    }

    /// The scenario called `name`.
    ///
    /// # Errors
    ///
    /// `cartpole has no scenario "s9": its scenarios are s1`.
    pub fn scenario(self, name: &str) -> Result<Scenario, String> {
        self.scenarios().iter().copied().find(|sc| sc.name == name).ok_or_else(|| {
            let all: Vec<&str> = self.scenarios().iter().map(|sc| sc.name).collect();
            format!(
                "{} has no scenario {:?}: its scenarios are {}",
                self.as_str(),
                crate::controller::shorten(name),
                all.join(", ")
            )
        })
    }
}

impl fmt::Display for PlantName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A plant component (two tasks share the cart-pole).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PlantComponentName {
    /// `guests/sims/cartpole`.
    CartPole,
    /// `guests/sims/shower`.
    Shower,
    /// `guests/sims/ship`.
    Ship,
    /// `guests/sims/buck`.
    Buck,
    /// `guests/sims/blackhole`.
    BlackHole,
    /// `guests/sims/rocket`.
    Rocket,
    /// `guests/sims/satclock`.
    SatClock,
    /// `guests/sims/slits`.
    Slits,
}

/// A module-run model (the `model` of a `module` payload).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ModelName {
    /// The Van der Pol oscillator (mu, x0, x1).
    VanDerPol,
    /// A bouncing ball (e, h, v).
    BouncingBall,
    /// The Lorenz system (rho, sigma, beta).
    Lorenz,
    /// A memory fixture: allocates p0 MiB, echoes p1.
    Greedy,
}

impl ModelName {
    /// Every model.
    pub const ALL: [ModelName; 4] =
        [ModelName::VanDerPol, ModelName::BouncingBall, ModelName::Lorenz, ModelName::Greedy];

    /// The name a `module` payload gives.
    pub fn as_str(self) -> &'static str {
        match self {
            ModelName::VanDerPol => "vanderpol",
            ModelName::BouncingBall => "bouncingball",
            ModelName::Lorenz => "lorenz",
            ModelName::Greedy => "greedy",
        }
    }

    /// The outputs the model writes per step (its component's description says the
    /// same; a test holds them together).
    pub fn outputs(self) -> usize {
        match self {
            ModelName::VanDerPol | ModelName::BouncingBall => 2,
            ModelName::Lorenz => 3,
            ModelName::Greedy => 1,
        }
    }

    /// Reads a model name.
    ///
    /// # Errors
    ///
    /// `unknown simulator "x": the models are vanderpol, ...`.
    pub fn parse(name: &str) -> Result<ModelName, String> {
        ModelName::ALL.into_iter().find(|m| m.as_str() == name).ok_or_else(|| {
            let all: Vec<&str> = ModelName::ALL.iter().map(|m| m.as_str()).collect();
            format!("unknown simulator {:?}: the models are {}", crate::controller::shorten(name), all.join(", "))
        })
    }
}

impl fmt::Display for ModelName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_back() {
        for p in PlantName::ALL {
            assert_eq!(PlantName::parse(p.as_str()), Ok(p));
            assert!(!p.scenarios().is_empty());
            assert_eq!(p.scenario("s1").map(|s| s.name), Ok("s1"));
        }
        for m in ModelName::ALL {
            assert_eq!(ModelName::parse(m.as_str()), Ok(m));
        }
    }

    #[test]
    fn unknown_names_are_refused_naming_the_choices() {
        let e = PlantName::parse("pendulum").expect_err("unknown");
        assert_eq!(
            e,
            "unknown plant \"pendulum\": the plants are cartpole, cartpole-swingup, shower, ship, buck, blackhole, \
             rocket, satclock, slits"
        );
        let e = PlantName::Buck.scenario("s9").expect_err("unknown");
        assert_eq!(e, "buck has no scenario \"s9\": its scenarios are s1, s2, s3, s4");
        let e = ModelName::parse("../x").expect_err("unknown");
        assert_eq!(e, "unknown simulator \"../x\": the models are vanderpol, bouncingball, lorenz, greedy");
    }
}
