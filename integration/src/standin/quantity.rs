//! Resource quantities (`500m`, `2`, `1Gi`, `1e3`) as integers of milli-units, enough to
//! compare requests with allocatable exactly.

/// A quantity in thousandths of its unit (`cpu: 500m` → 500, `memory: 1Ki` → 1_024_000).
pub fn parse_milli(text: &str) -> Result<i128, String> {
    let text = text.trim();
    let bad = || {
        format!(
            "quantity {text:?} is not valid: expected a number with an optional suffix (m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei, or an exponent like 1e3)"
        )
    };
    let suffixes: [(&str, i128, i128); 13] = [
        ("Ki", 1 << 10, 1),
        ("Mi", 1 << 20, 1),
        ("Gi", 1 << 30, 1),
        ("Ti", 1 << 40, 1),
        ("Pi", 1 << 50, 1),
        ("Ei", 1 << 60, 1),
        ("m", 1, 1000),
        ("k", 1_000, 1),
        ("M", 1_000_000, 1),
        ("G", 1_000_000_000, 1),
        ("T", 1_000_000_000_000, 1),
        ("P", 1_000_000_000_000_000, 1),
        ("E", 1_000_000_000_000_000_000, 1),
    ];
    let (number, multiply, divide) = suffixes
        .iter()
        .find_map(|(suffix, m, d)| text.strip_suffix(suffix).map(|n| (n, *m, *d)))
        .unwrap_or((text, 1, 1));
    let (mantissa, exponent) = match number.split_once(['e', 'E']) {
        Some((m, e)) => (m, e.parse::<i32>().map_err(|_| bad())?),
        None => (number, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if whole.is_empty() && fraction.is_empty() {
        return Err(bad());
    }
    let digits = format!("{whole}{fraction}");
    let negative = digits.starts_with('-');
    let digits = digits.trim_start_matches(['-', '+']);
    if !digits.chars().all(|c| c.is_ascii_digit()) || digits.is_empty() {
        return Err(bad());
    }
    let mut value: i128 = digits.parse().map_err(|_| bad())?;
    let mut scale = exponent - i32::try_from(fraction.len()).map_err(|_| bad())?;
    value = value.checked_mul(multiply * 1000).ok_or_else(bad)?;
    while scale > 0 {
        value = value.checked_mul(10).ok_or_else(bad)?;
        scale -= 1;
    }
    while scale < 0 {
        value /= 10;
        scale += 1;
    }
    value /= divide;
    Ok(if negative { -value } else { value })
}

#[cfg(test)]
mod tests {
    use super::parse_milli;

    #[test]
    fn quantities() {
        assert_eq!(parse_milli("500m").unwrap(), 500);
        assert_eq!(parse_milli("2").unwrap(), 2000);
        assert_eq!(parse_milli("1.5").unwrap(), 1500);
        assert_eq!(parse_milli("1Ki").unwrap(), 1_024_000);
        assert_eq!(parse_milli("1Gi").unwrap(), (1i128 << 30) * 1000);
        assert_eq!(parse_milli("1e3").unwrap(), 1_000_000);
        assert_eq!(parse_milli("2k").unwrap(), 2_000_000);
        assert!(parse_milli("lots").is_err());
        assert!(parse_milli("").is_err());
    }
}
