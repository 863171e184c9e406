//! Plain columns, as kubectl prints them: a header in capitals, each column as wide as its
//! widest cell, three spaces between columns, no trailing spaces.

/// `rows` under `header`, aligned left.
pub fn render(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut out = String::new();
        for (i, cell) in cells.enumerate() {
            if i > 0 {
                out.push_str("   ");
            }
            out.push_str(cell);
            let pad = widths.get(i).copied().unwrap_or(0);
            out.extend(std::iter::repeat_n(
                ' ',
                pad.saturating_sub(cell.chars().count()),
            ));
        }
        out.truncate(out.trim_end().len());
        out.push('\n');
        out
    };
    let mut out = line(&mut header.iter().copied());
    for row in rows {
        out.push_str(&line(&mut row.iter().map(String::as_str)));
    }
    out
}

/// A number of GPU-equivalents with two decimals, "-" when unknown.
pub fn number(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_string(), |v| format!("{v:.2}"))
}

/// A share (0..1) as a percentage with one decimal, "-" when unknown.
pub fn percent(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_string(), |v| format!("{:.1}%", v * 100.0))
}

/// 1st, 2nd, 3rd, 4th, 11th, 12th, 13th, 21st.
pub fn ordinal(n: u64) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_on_the_widest_cell_without_trailing_spaces() {
        let text = render(
            &["QUEUE", "WAITING"],
            &[
                vec!["research".into(), "3".into()],
                vec!["a".into(), "12".into()],
            ],
        );
        assert_eq!(text, "QUEUE      WAITING\nresearch   3\na          12\n");
    }

    #[test]
    fn numbers_and_ordinals_read_as_people_write_them() {
        assert_eq!(number(Some(2.0)), "2.00");
        assert_eq!(number(None), "-");
        assert_eq!(percent(Some(0.125)), "12.5%");
        let ordinals: Vec<String> = [1, 2, 3, 4, 11, 12, 13, 21, 22, 101, 111]
            .into_iter()
            .map(ordinal)
            .collect();
        assert_eq!(
            ordinals,
            [
                "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st",
                "111th"
            ]
        );
    }
}
