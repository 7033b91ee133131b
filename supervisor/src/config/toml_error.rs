//! Where a TOML error is: the line and the dotted key of the value it points at.

/// toml's message, plus the line number and the dotted key when it has a span (serde's
/// type errors say what was expected, not where: "invalid type: string, expected usize").
pub(super) fn describe_toml_error(text: &str, e: &toml::de::Error) -> String {
    let msg = e.message().trim().to_owned();
    let Some(span) = e.span() else {
        return msg;
    };
    let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
    match key_at(text, span.start) {
        Some(key) if !msg.contains(&format!("`{key}`")) => format!("line {line}: `{key}`: {msg}"),
        _ => format!("line {line}: {msg}"),
    }
}

/// The dotted path of the innermost value whose span holds `offset` (`None` when the
/// text does not parse as TOML at all, or the offset is outside every value).
fn key_at(text: &str, offset: usize) -> Option<String> {
    let table = toml::de::DeTable::parse(text).ok()?;
    let mut best: Option<(usize, String)> = None;
    find_key(table.get_ref(), "", offset, &mut best);
    best.map(|(_, key)| key)
}

/// Depth-first search for the narrowest value span containing `offset`.
fn find_key(
    table: &toml::de::DeTable<'_>,
    prefix: &str,
    offset: usize,
    best: &mut Option<(usize, String)>,
) {
    for (key, value) in table {
        let path = if prefix.is_empty() {
            key.get_ref().to_string()
        } else {
            format!("{prefix}.{}", key.get_ref())
        };
        find_in_value(value, path, offset, best);
    }
}

fn find_in_value(
    value: &toml::Spanned<toml::de::DeValue<'_>>,
    path: String,
    offset: usize,
    best: &mut Option<(usize, String)>,
) {
    let span = value.span();
    if span.contains(&offset) && best.as_ref().is_none_or(|(w, _)| span.len() <= *w) {
        *best = Some((span.len(), path.clone()));
    }
    match value.get_ref() {
        toml::de::DeValue::Table(t) => find_key(t, &path, offset, best),
        toml::de::DeValue::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                find_in_value(item, format!("{path}[{i}]"), offset, best);
            }
        }
        _ => {}
    }
}
