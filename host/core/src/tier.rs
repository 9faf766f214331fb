//! Isolation tiers and floors.
//!
//! A tier is evidence (configuration, a verified runtime, a startup smoke test),
//! never attestation: no hypervisor or kernel is measured.

use std::fmt;
use std::str::FromStr;

/// How strong a sandbox's wall is, weakest first.
///
/// `Unknown` meets no floor; `None` (nothing isolates, or nothing runs) meets none
/// either, since a floor can only name `process` or stronger.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tier {
    /// No evidence, or evidence that did not parse.
    #[default]
    Unknown,
    /// No boundary at all (the disabled provider).
    None,
    /// A boundary inside the host process (the wasm provider).
    Process,
    /// Namespaces and cgroups on the host kernel (docker under runc).
    Container,
    /// A user-space kernel between guest and host (gVisor).
    Kernel,
    /// A hardware virtual machine (Firecracker, Kata).
    Vm,
}

impl Tier {
    /// The wire string; `Unknown` is the empty string, as the protocol has no name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Unknown => "",
            Tier::None => "none",
            Tier::Process => "process",
            Tier::Container => "container",
            Tier::Kernel => "kernel",
            Tier::Vm => "vm",
        }
    }

    /// Reads a wire string; anything that is not a tier is `Unknown`.
    pub fn from_wire(s: &str) -> Tier {
        match s {
            "none" => Tier::None,
            "process" => Tier::Process,
            "container" => Tier::Container,
            "kernel" => Tier::Kernel,
            "vm" => Tier::Vm,
            _ => Tier::Unknown,
        }
    }

    /// Whether this tier satisfies `floor`. Only a real boundary (`process` or
    /// stronger) at or above the floor does; `Unknown` and `None` never do.
    pub fn meets(self, floor: Floor) -> bool {
        self >= Tier::Process && self >= floor.tier()
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Tier::Unknown => "unknown",
            other => other.as_str(),
        })
    }
}

/// A floor a request may set: the weakest tier it accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Floor {
    /// `process`
    Process,
    /// `container`
    Container,
    /// `kernel`
    Kernel,
    /// `vm`
    Vm,
}

impl Floor {
    /// Every floor, weakest first.
    pub const ALL: [Floor; 4] = [Floor::Process, Floor::Container, Floor::Kernel, Floor::Vm];

    /// The tier this floor requires.
    pub fn tier(self) -> Tier {
        match self {
            Floor::Process => Tier::Process,
            Floor::Container => Tier::Container,
            Floor::Kernel => Tier::Kernel,
            Floor::Vm => Tier::Vm,
        }
    }

    /// The wire string.
    pub fn as_str(self) -> &'static str {
        self.tier().as_str()
    }

    /// Reads an optional floor from the wire: `""` is no floor.
    ///
    /// # Errors
    ///
    /// [`FloorError`] for `none` (a floor of "no boundary" is taken for a mistake)
    /// and for anything that is not a tier.
    pub fn parse_optional(s: &str) -> Result<Option<Floor>, FloorError> {
        if s.is_empty() {
            return Ok(None);
        }
        s.parse().map(Some)
    }

    /// The stronger of two optional floors.
    pub fn stronger(a: Option<Floor>, b: Option<Floor>) -> Option<Floor> {
        a.max(b)
    }
}

impl FromStr for Floor {
    type Err = FloorError;

    fn from_str(s: &str) -> Result<Floor, FloorError> {
        match s {
            "process" => Ok(Floor::Process),
            "container" => Ok(Floor::Container),
            "kernel" => Ok(Floor::Kernel),
            "vm" => Ok(Floor::Vm),
            "none" => Err(FloorError::None),
            other => Err(FloorError::Unknown(other.to_string())),
        }
    }
}

impl fmt::Display for Floor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a floor string was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FloorError {
    /// `none` names no boundary, so it cannot be a floor.
    #[error("minimum isolation \"none\" is not a floor; use process, container, kernel or vm, or leave it empty")]
    None,
    /// Not a tier at all.
    #[error("minimum isolation {0:?} is not a tier; use process, container, kernel or vm")]
    Unknown(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_and_none_meet_no_floor() {
        for floor in Floor::ALL {
            assert!(!Tier::Unknown.meets(floor));
            assert!(!Tier::None.meets(floor));
        }
    }

    #[test]
    fn tiers_meet_floors_at_or_below_them() {
        assert!(Tier::Process.meets(Floor::Process));
        assert!(!Tier::Process.meets(Floor::Container));
        assert!(Tier::Kernel.meets(Floor::Container));
        assert!(!Tier::Kernel.meets(Floor::Vm));
        assert!(Tier::Vm.meets(Floor::Vm));
    }

    #[test]
    fn floor_strings_parse_exactly() {
        assert_eq!(Floor::parse_optional(""), Ok(None));
        assert_eq!(Floor::parse_optional("kernel"), Ok(Some(Floor::Kernel)));
        assert_eq!(Floor::parse_optional("none"), Err(FloorError::None));
        assert_eq!(Floor::parse_optional("Kernel"), Err(FloorError::Unknown("Kernel".into())));
        assert_eq!(Floor::parse_optional("strong"), Err(FloorError::Unknown("strong".into())));
    }

    #[test]
    fn wire_strings_round_trip_and_junk_is_unknown() {
        for t in [Tier::None, Tier::Process, Tier::Container, Tier::Kernel, Tier::Vm] {
            assert_eq!(Tier::from_wire(t.as_str()), t);
        }
        assert_eq!(Tier::from_wire("VM"), Tier::Unknown);
        assert_eq!(Tier::from_wire(""), Tier::Unknown);
    }

    #[test]
    fn stronger_floor_wins() {
        assert_eq!(Floor::stronger(None, Some(Floor::Kernel)), Some(Floor::Kernel));
        assert_eq!(Floor::stronger(Some(Floor::Vm), Some(Floor::Kernel)), Some(Floor::Vm));
        assert_eq!(Floor::stronger(None, None), None);
    }
}
