//! Description files: TOML (`[[layer]]` tables) or JSON (`{"layer": [...]}`), the same
//! vocabulary as [`super::Layer`]. Unknown keys and ops are errors, with the line.

use std::path::Path;

use serde::Deserialize;

use super::{NetSpec, Node, SpecError};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlFile {
    layer: Vec<toml::Spanned<Node>>,
}

/// A description from TOML text.
pub fn from_toml(text: &str) -> Result<NetSpec, SpecError> {
    let file: TomlFile = toml::from_str(text).map_err(|e| SpecError {
        layer: None,
        line: e.span().map(|s| line_of(text, s.start)),
        message: e.message().trim_end().to_string(),
    })?;
    let layers = file
        .layer
        .into_iter()
        .map(|s| {
            let line = line_of(text, s.span().start);
            Node {
                line: Some(line),
                ..s.into_inner()
            }
        })
        .collect();
    Ok(NetSpec { layers })
}

/// A description from JSON text.
pub fn from_json(text: &str) -> Result<NetSpec, SpecError> {
    serde_json::from_str(text).map_err(|e| SpecError {
        layer: None,
        line: Some(e.line()),
        message: e.to_string(),
    })
}

/// Reads a `.toml` or `.json` description (by its extension; TOML otherwise).
pub fn read_file(path: &Path) -> Result<NetSpec, SpecError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        SpecError::whole(format!(
            "cannot read network description {}: {e}",
            path.display()
        ))
    })?;
    let json = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"));
    let spec = if json {
        from_json(&text)
    } else {
        from_toml(&text)
    };
    spec.map_err(|e| SpecError {
        message: format!("{}: {}", path.display(), e.message),
        ..e
    })
}

/// The 1-based line of byte `offset`.
fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}
