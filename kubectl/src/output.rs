//! `-o json|yaml`, or the default table.

use serde::Serialize;

/// How a command prints what it found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Columns (`queues`, `pending`) or a paragraph (`why`).
    Table,
    Json,
    Yaml,
}

/// `value` as `format` asks, `table` giving the human form.
pub fn render<T: Serialize>(
    format: Format,
    value: &T,
    table: impl FnOnce(&T) -> String,
) -> anyhow::Result<String> {
    Ok(match format {
        Format::Table => table(value),
        Format::Json => {
            let mut text = serde_json::to_string_pretty(value)?;
            text.push('\n');
            text
        }
        Format::Yaml => serde_yaml::to_string(value)?,
    })
}
