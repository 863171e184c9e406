//! Number formatting for tables.

/// Seconds as a short human duration: `45s`, `12.5m`, `3.2h`, `4.1d`.
pub fn duration(seconds: f64) -> String {
    if !seconds.is_finite() {
        return "-".into();
    }
    let s = seconds.max(0.0);
    if s < 60.0 {
        format!("{s:.0}s")
    } else if s < 3600.0 {
        format!("{:.1}m", s / 60.0)
    } else if s < 86_400.0 {
        format!("{:.1}h", s / 3600.0)
    } else {
        format!("{:.1}d", s / 86_400.0)
    }
}

pub fn opt_duration(seconds: Option<f64>) -> String {
    seconds.map_or_else(|| "-".into(), duration)
}

pub fn percent(fraction: f64) -> String {
    format!("{:.1}%", fraction * 100.0)
}

/// Left-aligned first column, right-aligned others, padded to the widest cell.
pub fn table(header: &[String], rows: &[Vec<String>]) -> String {
    let columns = header.len();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate().take(columns) {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let line = |cells: &[String]| -> String {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate().take(columns) {
            let pad = widths[i] - cell.chars().count();
            if i == 0 {
                out.push_str(cell);
                out.push_str(&" ".repeat(pad));
            } else {
                out.push_str("  ");
                out.push_str(&" ".repeat(pad));
                out.push_str(cell);
            }
        }
        out.trim_end().to_string()
    };
    let mut out = line(header);
    out.push('\n');
    out.push_str(&"-".repeat(widths.iter().sum::<usize>() + 2 * (columns - 1)));
    out.push('\n');
    for row in rows {
        out.push_str(&line(row));
        out.push('\n');
    }
    out
}

/// The same table in Markdown.
pub fn markdown_table(header: &[String], rows: &[Vec<String>]) -> String {
    let mut out = format!("| {} |\n", header.join(" | "));
    out.push_str(&format!(
        "|{}\n",
        header
            .iter()
            .enumerate()
            .map(|(i, _)| if i == 0 { "---|" } else { "---:|" })
            .collect::<String>()
    ));
    for row in rows {
        out.push_str(&format!("| {} |\n", row.join(" | ")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(duration(42.0), "42s");
        assert_eq!(duration(90.0), "1.5m");
        assert_eq!(duration(5400.0), "1.5h");
        assert_eq!(duration(172_800.0), "2.0d");
        assert_eq!(opt_duration(None), "-");
    }

    #[test]
    fn aligned_table() {
        let t = table(
            &["metric".into(), "a".into()],
            &[
                vec!["x".into(), "1.0".into()],
                vec!["longer".into(), "10".into()],
            ],
        );
        assert_eq!(t, "metric    a\n-----------\nx       1.0\nlonger   10\n");
    }
}
