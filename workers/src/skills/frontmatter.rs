//! The YAML front matter of a `SKILL.md`: a `---` line, YAML, a `---` line, then the
//! body. Only the top-level scalar fields are read (`name`, `description`, and any
//! other the caller wants); nested values are skipped.
//!
//! The YAML is read as parser events (`yaml-rust2`), never built into a document: an
//! alias is refused rather than expanded (a few lines of anchors and aliases can stand
//! for billions of nodes), nesting is bounded, and so is the size of the front matter.

use std::collections::BTreeMap;

use yaml_rust2::parser::{Event, Parser};

/// The largest front matter read.
pub const MAX_FRONT: usize = 64 * 1024;

/// Deepest nesting of values inside the front matter.
const MAX_NESTING: usize = 32;

/// A SKILL.md split into its front matter's top-level scalars and its body.
#[derive(Debug, PartialEq, Eq)]
pub struct Document<'a> {
    /// The front matter's top-level scalar fields.
    pub fields: BTreeMap<String, String>,
    /// Everything after the closing `---` line.
    pub body: &'a str,
}

/// Why a SKILL.md cannot be read.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrontError {
    /// The file does not start with `---`.
    #[error("it has no YAML front matter (a `---` line first, the fields, then a `---` line)")]
    Missing,
    /// No closing `---`.
    #[error("its front matter is not closed by a `---` line")]
    Unclosed,
    /// Past the size limit.
    #[error("its front matter is larger than {MAX_FRONT} bytes")]
    TooLarge,
    /// The YAML parser's complaint.
    #[error("its front matter is not valid YAML: {0}")]
    Yaml(String),
    /// Not a mapping at the top.
    #[error("its front matter is not a mapping of fields")]
    NotMapping,
    /// A YAML alias (refused: aliases can blow up).
    #[error("its front matter uses a YAML alias (`*name`), which is not read")]
    Alias,
    /// Nested too deep.
    #[error("its front matter nests deeper than {MAX_NESTING} levels")]
    TooDeep,
}

/// Split `text` into front matter fields and body.
pub fn parse(text: &str) -> Result<Document<'_>, FrontError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    let first = lines.next().ok_or(FrontError::Missing)?;
    if first.trim_end() != "---" {
        return Err(FrontError::Missing);
    }
    let start = first.len();
    let mut pos = start;
    for line in lines {
        let end = pos;
        pos += line.len();
        if matches!(line.trim_end(), "---" | "...") {
            if end - start > MAX_FRONT {
                return Err(FrontError::TooLarge);
            }
            let fields = scalars(&text[start..end])?;
            return Ok(Document {
                fields,
                body: &text[pos..],
            });
        }
        if pos - start > MAX_FRONT {
            return Err(FrontError::TooLarge);
        }
    }
    Err(FrontError::Unclosed)
}

/// The top-level `key: scalar` pairs of a YAML mapping (an empty text has none).
fn scalars(yaml: &str) -> Result<BTreeMap<String, String>, FrontError> {
    let mut parser = Parser::new_from_str(yaml);
    let mut fields = BTreeMap::new();
    let mut depth = 0usize;
    let mut key: Option<String> = None;
    loop {
        let (event, _) = parser
            .next_token()
            .map_err(|e| FrontError::Yaml(e.to_string()))?;
        match event {
            Event::StreamEnd | Event::DocumentEnd => break,
            Event::Alias(_) => return Err(FrontError::Alias),
            Event::MappingStart(..) | Event::SequenceStart(..) => {
                let mapping = matches!(event, Event::MappingStart(..));
                if depth == 0 && !mapping {
                    return Err(FrontError::NotMapping);
                }
                if depth == 1 {
                    key = None; // a nested value (or key): skipped
                }
                depth += 1;
                if depth > MAX_NESTING {
                    return Err(FrontError::TooDeep);
                }
            }
            Event::MappingEnd | Event::SequenceEnd => depth = depth.saturating_sub(1),
            Event::Scalar(value, ..) => match depth {
                0 if value.is_empty() => {} // an empty document
                0 => return Err(FrontError::NotMapping),
                1 => match key.take() {
                    None => key = Some(value),
                    Some(k) => {
                        fields.insert(k, value);
                    }
                },
                _ => {}
            },
            _ => {}
        }
    }
    Ok(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field<'a>(d: &'a Document<'_>, k: &str) -> Option<&'a str> {
        d.fields.get(k).map(String::as_str)
    }

    #[test]
    fn fields_and_body() {
        let d = parse("---\nname: pdf\ndescription: >\n  Read PDFs\n  and forms.\nmetadata:\n  version: 2\nallowed-tools: [a, b]\n---\n# PDF\nUse it.\n").unwrap();
        assert_eq!(field(&d, "name"), Some("pdf"));
        assert_eq!(field(&d, "description"), Some("Read PDFs and forms.\n"));
        assert_eq!(field(&d, "version"), None, "nested values are skipped");
        assert_eq!(d.body, "# PDF\nUse it.\n");
        let q = parse("---\r\nname: \"a: b\"\r\ndescription: 'it''s'\r\n---\r\nbody").unwrap();
        assert_eq!(field(&q, "name"), Some("a: b"));
        assert_eq!(field(&q, "description"), Some("it's"));
        assert_eq!(q.body, "body");
    }

    #[test]
    fn what_is_refused() {
        assert_eq!(parse("# Just markdown\n"), Err(FrontError::Missing));
        assert_eq!(parse(""), Err(FrontError::Missing));
        assert_eq!(parse("---\nname: x\n"), Err(FrontError::Unclosed));
        assert_eq!(parse("---\n- a\n- b\n---\n"), Err(FrontError::NotMapping));
        assert_eq!(parse("---\njust text\n---\n"), Err(FrontError::NotMapping));
        assert!(matches!(
            parse("---\nname: [unclosed\n---\n"),
            Err(FrontError::Yaml(_))
        ));
        let laughs = "---\na: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b]\nname: boom\n---\n";
        assert_eq!(parse(laughs), Err(FrontError::Alias));
        let deep = format!("---\nname: {}x{}\n---\n", "[".repeat(40), "]".repeat(40));
        assert_eq!(parse(&deep), Err(FrontError::TooDeep));
        let big = format!(
            "---\nname: x\ndescription: {}\n---\n",
            "y".repeat(MAX_FRONT)
        );
        assert_eq!(parse(&big), Err(FrontError::TooLarge));
        assert_eq!(parse("---\n---\nbody").unwrap().fields.len(), 0);
    }
}
