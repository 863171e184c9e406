//! Kubernetes quantities (`500m`, `16Gi`, `2`, `1e3`): the one reading of them, for the
//! admission path (is a GPU request zero?) and the controller (the whole counts core's placement
//! compares).
//!
//! Core counts every resource as `u32`, so each resource gets a unit that fits: CPU in
//! millicores, memory-like resources (memory, ephemeral storage, hugepages) in MiB, everything
//! else in units. Requests round up and capacity rounds down, so a pod judged to fit does fit.

/// Why a quantity could not be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "quantity {text:?} is invalid: expected a number with an optional suffix \
     (n, u, m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei) or exponent, e.g. 500m, 16Gi, 1e3"
)]
pub struct QuantityError {
    pub text: String,
}

/// The value of a quantity in base units (cores, bytes, counts).
pub fn parse_quantity(text: &str) -> Result<f64, QuantityError> {
    let bad = || QuantityError {
        text: text.to_string(),
    };
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(trimmed.len());
    let (number, suffix) = trimmed.split_at(split);
    let number: f64 = number.parse().map_err(|_| bad())?;
    let factor = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        exponent if exponent.starts_with(['e', 'E']) => {
            let power: i32 = exponent[1..].parse().map_err(|_| bad())?;
            10f64.powi(power)
        }
        _ => return Err(bad()),
    };
    let value = number * factor;
    if value.is_finite() && value >= 0.0 {
        Ok(value)
    } else {
        Err(bad())
    }
}

/// Whether a quantity (`0`, `0.0`, `0m`, `0Ki`, `0e3`…) is zero. Anything this cannot read
/// counts as non-zero: the API server has already validated the syntax, and treating an odd
/// spelling as "no GPU" would let a GPU pod bypass the gate.
pub fn is_zero(text: &str) -> bool {
    parse_quantity(text).is_ok_and(|value| value == 0.0)
}

/// How a resource is counted in the snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Millicores,
    Mebibytes,
    Units,
}

impl Unit {
    pub fn of(resource: &str) -> Self {
        if resource == "cpu" {
            Self::Millicores
        } else if resource == "memory"
            || resource == "ephemeral-storage"
            || resource.starts_with("hugepages-")
        {
            Self::Mebibytes
        } else {
            Self::Units
        }
    }

    fn scale(self, base: f64) -> f64 {
        match self {
            Self::Millicores => base * 1000.0,
            Self::Mebibytes => base / (1024.0 * 1024.0),
            Self::Units => base,
        }
    }

    /// A request, rounded up.
    pub fn request(self, base: f64) -> u32 {
        clamp(self.scale(base).ceil())
    }

    /// A capacity, rounded down.
    pub fn capacity(self, base: f64) -> u32 {
        clamp(self.scale(base).floor())
    }
}

fn clamp(value: f64) -> u32 {
    if value >= f64::from(u32::MAX) {
        u32::MAX
    } else if value > 0.0 {
        value as u32
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_forms_kubernetes_writes() {
        assert_eq!(parse_quantity("2"), Ok(2.0));
        assert_eq!(parse_quantity("500m"), Ok(0.5));
        assert_eq!(parse_quantity("16Gi"), Ok(16.0 * 1024.0 * 1024.0 * 1024.0));
        assert_eq!(parse_quantity("1e3"), Ok(1000.0));
        assert_eq!(parse_quantity("1.5k"), Ok(1500.0));
        for bad in ["", "Gi", "1Qi", "-1", "1e", "abc"] {
            let err = parse_quantity(bad).unwrap_err().to_string();
            assert!(err.contains("16Gi"), "{bad}: {err}");
        }
    }

    #[test]
    fn zero_only_when_read_as_zero() {
        for zero in ["0", "0.0", "0m", "0Ki", " 0 ", "+0", "0e3"] {
            assert!(is_zero(zero), "{zero}");
        }
        for non_zero in ["1", "500m", "0.5", "2Gi", "", "x", "1e-3", "0x", "0Qi"] {
            assert!(!is_zero(non_zero), "{non_zero}");
        }
    }

    #[test]
    fn requests_round_up_and_capacity_down() {
        assert_eq!(Unit::of("cpu").request(0.0001), 1);
        assert_eq!(Unit::of("cpu").capacity(7.9999), 7999);
        let mib = 1024.0 * 1024.0;
        assert_eq!(Unit::of("memory").request(mib + 1.0), 2);
        assert_eq!(Unit::of("memory").capacity(2.0 * mib - 1.0), 1);
        assert_eq!(Unit::of("nvidia.com/gpu").request(4.0), 4);
        assert_eq!(Unit::of("memory").capacity(1e30), u32::MAX);
    }
}
