//! Presenting results: terminal tables, JSON, and a Markdown report with SVG plots.

pub mod format;
pub mod json;
pub mod markdown;
pub mod plots;
pub mod svg;
pub mod tables;

use crate::metrics::PolicyReport;
use crate::scenario::Scenario;

/// The side-by-side tables as plain text.
pub fn text_tables(scenario: &Scenario, reports: &[&PolicyReport]) -> String {
    let mut out = String::new();
    for table in tables::all(scenario, reports) {
        out.push_str(&table.title);
        out.push('\n');
        out.push_str(&format::table(&table.header, &table.rows));
        out.push('\n');
    }
    out
}
