//! MIG profiles: the one grammar for the names NVIDIA's driver and go-nvlib give MIG instances,
//! and for the extended resources device plugins advertise them under.
//!
//! A profile is `[<C>c.]<G>g.<GB>gb` and, optionally, the GPU instance profile's attribute: `+me`
//! (media extensions), `+me.all`, `+gfx`, or `-me` (no media engines, Blackwell). `C` appears
//! only when the compute instance uses fewer slices than its GPU instance (`1c.3g.71gb`).
//!
//! A resource name cannot hold `+`, so NVIDIA's device plugin, and gpufair's, advertise
//! `1g.18gb+me` as `nvidia.com/mig-1g.18gb.me`; `-me` stays as it is (`nvidia.com/mig-1g.23gb-me`).
//! Both spellings parse to the same [`MigProfile`], and [`MigProfile::resource_name`] writes the
//! second from the first.

use std::fmt;

/// Prefix of MIG resources in the mixed strategy, e.g. `nvidia.com/mig-1g.10gb`.
pub const MIG_RESOURCE_PREFIX: &str = "nvidia.com/mig-";
/// The most slices a GPU instance profile has (NVML's `8_SLICE`).
pub const MAX_GPU_SLICES: u32 = 8;
/// Longest name part of a Kubernetes extended resource (after `nvidia.com/`).
const MAX_NAME_LEN: usize = 63;

const FORMS: &str = "[<C>c.]<G>g.<GB>gb with 1 <= C <= G <= 8 and GB >= 1, optionally followed \
     by +me, +me.all, +gfx or -me (as a resource: nvidia.com/mig-3g.40gb, nvidia.com/mig-1g.18gb.me, \
     nvidia.com/mig-1c.3g.71gb, nvidia.com/mig-1g.23gb-me)";

/// A MIG profile name gpufair cannot read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("MIG profile {profile:?} is malformed ({reason}): expected {FORMS}")]
pub struct MigProfileError {
    pub profile: String,
    pub reason: String,
}

/// Whether the GPU instance profile adds engines (`+`) or removes them (`-`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttributeSign {
    Plus,
    Minus,
}

impl AttributeSign {
    fn as_char(self) -> char {
        match self {
            AttributeSign::Plus => '+',
            AttributeSign::Minus => '-',
        }
    }
}

/// A MIG profile taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigProfile {
    /// Slices of the compute instance: what fair share divides.
    pub compute_slices: u32,
    /// Slices of the GPU instance.
    pub gpu_slices: u32,
    /// The instance's memory as the name gives it, in GB.
    pub memory_gb: u64,
    /// The GPU instance profile's attribute (`me`, `me.all`, `gfx`) and its sign, if any.
    pub attribute: Option<(AttributeSign, String)>,
}

impl MigProfile {
    /// Parses a profile as the driver names it: `3g.40gb`, `1c.3g.71gb`, `1g.18gb+me`,
    /// `1g.23gb-me`.
    pub fn parse(profile: &str) -> Result<MigProfile, MigProfileError> {
        let error = |reason: String| MigProfileError {
            profile: profile.to_string(),
            reason,
        };
        let (base, attribute) = match (profile.find('+'), profile.find('-')) {
            (Some(_), Some(_)) => return Err(error("has both + and - attributes".into())),
            (Some(at), None) => (
                &profile[..at],
                Some((AttributeSign::Plus, &profile[at + 1..])),
            ),
            (None, Some(at)) => (
                &profile[..at],
                Some((AttributeSign::Minus, &profile[at + 1..])),
            ),
            (None, None) => (profile, None),
        };
        let fields: Vec<&str> = base.split('.').collect();
        let (compute, gpu_slices, memory_gb) = match fields.as_slice() {
            [c, g, gb] => (
                Some(count(c, "c").map_err(error)?),
                count(g, "g").map_err(error)?,
                count(gb, "gb").map_err(error)?,
            ),
            [g, gb] => (
                None,
                count(g, "g").map_err(error)?,
                count(gb, "gb").map_err(error)?,
            ),
            _ => {
                return Err(error(
                    "expected two or three fields before the attribute".into(),
                ));
            }
        };
        let gpu_slices = slices(gpu_slices).map_err(error)?;
        let compute_slices = match compute {
            Some(c) => slices(c).map_err(error)?,
            None => gpu_slices,
        };
        if compute_slices > gpu_slices {
            return Err(error(format!(
                "{compute_slices}c is more than the GPU instance's {gpu_slices}g"
            )));
        }
        let attribute = match attribute {
            Some((sign, word)) if is_attribute(word) => Some((sign, word.to_string())),
            Some((_, word)) => {
                return Err(error(format!(
                    "attribute {word:?} is not a word such as me, me.all or gfx"
                )));
            }
            None => None,
        };
        Ok(MigProfile {
            compute_slices,
            gpu_slices,
            memory_gb,
            attribute,
        })
    }

    /// Parses an extended resource name: `nvidia.com/mig-1g.18gb.me`, `nvidia.com/mig-3g.40gb`.
    /// `None` when the name is not a MIG resource at all.
    pub fn from_resource_name(name: &str) -> Option<Result<MigProfile, MigProfileError>> {
        let part = name.strip_prefix(MIG_RESOURCE_PREFIX)?;
        Some(
            Self::parse(&profile_of_resource_part(part)).map_err(|mut error| {
                error.profile = name.to_string();
                error
            }),
        )
    }

    /// The resource a device plugin advertises this profile under, or why it cannot be one.
    pub fn resource_name(&self) -> Result<String, MigProfileError> {
        let part = format!("mig-{}", self.to_string().replace('+', "."));
        let bytes = part.as_bytes();
        let valid = part.len() <= MAX_NAME_LEN
            && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
            && part
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if valid {
            Ok(format!("nvidia.com/{part}"))
        } else {
            Err(MigProfileError {
                profile: self.to_string(),
                reason: format!(
                    "{part:?} is not a resource name (at most {MAX_NAME_LEN} letters, digits, \
                     '-', '_' or '.')"
                ),
            })
        }
    }
}

impl fmt::Display for MigProfile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.compute_slices != self.gpu_slices {
            write!(f, "{}c.", self.compute_slices)?;
        }
        write!(f, "{}g.{}gb", self.gpu_slices, self.memory_gb)?;
        if let Some((sign, word)) = &self.attribute {
            write!(f, "{}{word}", sign.as_char())?;
        }
        Ok(())
    }
}

/// The profile spelling of a resource name's part after `nvidia.com/mig-`: what follows the
/// `<GB>gb` field after a `.` was a `+` attribute.
fn profile_of_resource_part(part: &str) -> String {
    if part.contains('-') || part.contains('+') {
        return part.to_string();
    }
    let fields: Vec<&str> = part.split('.').collect();
    match fields.iter().position(|f| f.ends_with("gb")) {
        Some(at) if at + 1 < fields.len() => {
            format!("{}+{}", fields[..=at].join("."), fields[at + 1..].join("."))
        }
        _ => part.to_string(),
    }
}

/// `<n><unit>` with n >= 1.
fn count(text: &str, unit: &str) -> Result<u64, String> {
    text.strip_suffix(unit)
        .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|n| n.parse::<u64>().ok())
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("{text:?} is not <number>{unit} with a number >= 1"))
}

fn slices(n: u64) -> Result<u32, String> {
    u32::try_from(n)
        .ok()
        .filter(|n| *n <= MAX_GPU_SLICES)
        .ok_or_else(|| format!("{n} slices is more than a GPU has ({MAX_GPU_SLICES})"))
}

/// `me`, `me.all`, `gfx`: words of letters and digits, starting with a letter, joined by `.`.
fn is_attribute(word: &str) -> bool {
    !word.is_empty()
        && word.split('.').all(|w| {
            w.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
                && w.chars().all(|c| c.is_ascii_alphanumeric())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> MigProfile {
        MigProfile::parse(text).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn reads_every_form_nvidia_prints() {
        let p = parsed("3g.40gb");
        assert_eq!((p.compute_slices, p.gpu_slices, p.memory_gb), (3, 3, 40));
        assert_eq!(p.attribute, None);
        let p = parsed("1c.3g.71gb");
        assert_eq!((p.compute_slices, p.gpu_slices, p.memory_gb), (1, 3, 71));
        assert_eq!(
            parsed("1g.18gb+me").attribute,
            Some((AttributeSign::Plus, "me".into()))
        );
        assert_eq!(
            parsed("1g.18gb+me.all").attribute,
            Some((AttributeSign::Plus, "me.all".into()))
        );
        assert_eq!(
            parsed("1g.23gb-me").attribute,
            Some((AttributeSign::Minus, "me".into()))
        );
        assert_eq!(parsed("8g.192gb").gpu_slices, 8);
    }

    #[test]
    fn names_round_trip() {
        for name in [
            "3g.40gb",
            "1c.3g.71gb",
            "1g.18gb+me",
            "1g.18gb+me.all",
            "4g.71gb+gfx",
            "1g.23gb-me",
            "2c.4g.71gb+gfx",
        ] {
            assert_eq!(parsed(name).to_string(), name);
        }
    }

    #[test]
    fn resource_names_follow_nvidias_device_plugin() {
        let cases = [
            ("3g.40gb", "nvidia.com/mig-3g.40gb"),
            ("1g.18gb+me", "nvidia.com/mig-1g.18gb.me"),
            ("1g.18gb+me.all", "nvidia.com/mig-1g.18gb.me.all"),
            ("1c.3g.40gb+me", "nvidia.com/mig-1c.3g.40gb.me"),
            ("1g.23gb-me", "nvidia.com/mig-1g.23gb-me"),
        ];
        for (profile, resource) in cases {
            let profile = parsed(profile);
            assert_eq!(profile.resource_name().as_deref(), Ok(resource));
            assert_eq!(MigProfile::from_resource_name(resource), Some(Ok(profile)));
        }
        assert_eq!(MigProfile::from_resource_name("nvidia.com/gpu"), None);
        let long = MigProfile {
            compute_slices: 1,
            gpu_slices: 1,
            memory_gb: 1,
            attribute: Some((AttributeSign::Plus, "a".repeat(70))),
        };
        assert!(long.resource_name().is_err());
    }

    #[test]
    fn refuses_malformed_names_saying_why_and_what_is_accepted() {
        for bad in [
            "big",
            "1g",
            "1g.10",
            "0g.10gb",
            "9g.10gb",
            "xg.5gb",
            "1g.gb",
            "1g.0gb",
            "1g.1.5gb",
            "1g.10gb+",
            "1g.10gb+me-x",
            "4c.3g.40gb",
            "1g.10gb+9x",
            "1g.10gb+me.",
            "+me",
        ] {
            let error = MigProfile::parse(bad).expect_err(bad);
            let text = error.to_string();
            assert!(
                text.contains(bad) && text.contains("[<C>c.]<G>g.<GB>gb"),
                "{text}"
            );
        }
        let error = MigProfile::from_resource_name("nvidia.com/mig-1g")
            .expect("a MIG resource")
            .expect_err("malformed");
        assert_eq!(error.profile, "nvidia.com/mig-1g");
        assert!(
            MigProfile::from_resource_name("nvidia.com/mig-")
                .expect("a MIG resource")
                .is_err()
        );
    }
}
