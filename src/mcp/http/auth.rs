//! Bearer tokens (`--token-file`): which client a request comes from.

use std::path::{Path, PathBuf};

use hyper::header::{AUTHORIZATION, HeaderMap};

/// Why the token file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("cannot read the token file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the token file {0} has no token (one a line)")]
    Empty(PathBuf),
    #[error("a token in {0} is shorter than 16 characters")]
    Short(PathBuf),
}

/// The tokens clients may present; a client is the index of its token.
#[derive(Debug)]
pub struct Tokens(Vec<Vec<u8>>);

/// Shortest token accepted: guessing must not be an option.
const MIN_LEN: usize = 16;

impl Tokens {
    /// The non-empty, trimmed lines of `path` (`#` starts a comment line).
    pub fn load(path: &Path) -> Result<Tokens, TokenError> {
        let text = std::fs::read_to_string(path).map_err(|source| TokenError::Read {
            path: path.to_owned(),
            source,
        })?;
        Tokens::parse(&text).map_err(|e| match e {
            ParseError::Empty => TokenError::Empty(path.to_owned()),
            ParseError::Short => TokenError::Short(path.to_owned()),
        })
    }

    fn parse(text: &str) -> Result<Tokens, ParseError> {
        let tokens: Vec<Vec<u8>> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(|l| l.as_bytes().to_vec())
            .collect();
        if tokens.is_empty() {
            return Err(ParseError::Empty);
        }
        if tokens.iter().any(|t| t.len() < MIN_LEN) {
            return Err(ParseError::Short);
        }
        Ok(Tokens(tokens))
    }

    /// The client whose token the request's `Authorization: Bearer` carries.
    pub fn client(&self, headers: &HeaderMap) -> Option<usize> {
        let value = headers.get(AUTHORIZATION)?.to_str().ok()?;
        let (scheme, token) = value.trim().split_once(' ')?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return None;
        }
        let token = token.trim().as_bytes();
        // Every token compared in full, so the time says nothing of which matched.
        self.0
            .iter()
            .enumerate()
            .fold(None, |found, (i, t)| match constant_eq(t, token) {
                true => Some(i),
                false => found,
            })
    }
}

enum ParseError {
    Empty,
    Short,
}

/// Equality in a time that depends on the lengths only.
fn constant_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    fn with_auth(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(AUTHORIZATION, HeaderValue::from_str(v).unwrap());
        h
    }

    #[test]
    fn each_token_is_a_client() {
        let t = Tokens::parse("# clients\naaaaaaaaaaaaaaaa\n\n bbbbbbbbbbbbbbbb \n")
            .unwrap_or_else(|_| panic!("parse"));
        assert_eq!(t.client(&with_auth("Bearer aaaaaaaaaaaaaaaa")), Some(0));
        assert_eq!(t.client(&with_auth("bearer bbbbbbbbbbbbbbbb")), Some(1));
        assert_eq!(t.client(&with_auth("Bearer aaaaaaaaaaaaaaab")), None);
        assert_eq!(t.client(&with_auth("Basic aaaaaaaaaaaaaaaa")), None);
        assert_eq!(t.client(&HeaderMap::new()), None);
    }

    #[test]
    fn empty_or_short_tokens_are_refused() {
        assert!(matches!(
            Tokens::parse("# none\n\n"),
            Err(ParseError::Empty)
        ));
        assert!(matches!(Tokens::parse("short"), Err(ParseError::Short)));
    }
}
