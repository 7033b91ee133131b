//! Framing: a 4-byte big-endian length N, then N bytes of MessagePack (a map with
//! string keys and a string `type`).
//!
//! The length is checked before any body byte is buffered, and decoding caps nesting
//! at [`MAX_DEPTH`] so hostile input yields an error, never a stack overflow.

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncRead, AsyncReadExt};

/// Deepest nesting of arrays and maps a frame may have.
pub const MAX_DEPTH: usize = 32;

/// Failure to read or write one frame. After `TooLarge` the stream cannot be
/// resynchronised.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The length prefix announces more than the reader accepts (`max_frame_bytes`):
    /// the body is never buffered, and the connection is closed.
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        /// The announced body length.
        len: usize,
        /// The limit it exceeds.
        max: usize,
    },
    /// The stream ended between a frame's first byte and its last.
    #[error("connection closed in the middle of a frame")]
    Truncated,
    /// The socket failed.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// A message could not be serialised (a bug on the sending side, never input).
    #[error("encode: {0}")]
    Encode(#[from] rmp_serde::encode::Error),
}

/// Why a complete frame's body was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DecodeError {
    /// Not MessagePack, nested too deeply, or not a map.
    #[error("{0}")]
    Malformed(String),
    /// A map with a string `type` this side does not know; `id` is echoed.
    #[error("unknown message type `{kind}`")]
    UnknownType {
        /// The `type` as sent.
        kind: String,
        /// The request's `id`, so the error can be matched to it.
        id: Option<crate::Id>,
    },
    /// A map without a string `type`, or a known `type` whose fields are missing or of
    /// the wrong type; `id` is echoed.
    #[error("{message}")]
    BadFields {
        /// What is wrong, for the client to read.
        message: String,
        /// The request's `id`, so the error can be matched to it.
        id: Option<crate::Id>,
    },
}

/// Serialize `msg` as a named map and prefix the length.
pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, FrameError> {
    let mut buf = Vec::new();
    encode_into(&mut buf, msg)?;
    Ok(buf)
}

/// Append `msg`'s frame (length, then body) to `buf`: the one place a frame is
/// length-prefixed, so a writer can gather many frames in one buffer without a copy
/// each. On error `buf` is left as it was.
pub fn encode_into<T: Serialize>(buf: &mut Vec<u8>, msg: &T) -> Result<(), FrameError> {
    let start = buf.len();
    buf.extend_from_slice(&[0u8; 4]);
    let done = rmp_serde::encode::write_named(buf, msg)
        .map_err(FrameError::from)
        .and_then(|()| {
            let len = buf.len() - start - 4;
            let prefix = u32::try_from(len).map_err(|_| FrameError::TooLarge {
                len,
                max: u32::MAX as usize,
            })?;
            buf[start..start + 4].copy_from_slice(&prefix.to_be_bytes());
            Ok(())
        });
    if done.is_err() {
        buf.truncate(start);
    }
    done
}

/// Read one frame body. `Ok(None)` is a clean end of stream between frames.
pub async fn read_frame<R: AsyncRead + Unpin>(
    rd: &mut R,
    max: usize,
) -> Result<Option<Vec<u8>>, FrameError> {
    let mut head = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        let n = rd.read(&mut head[got..]).await?;
        if n == 0 {
            return if got == 0 {
                Ok(None)
            } else {
                Err(FrameError::Truncated)
            };
        }
        got += n;
    }
    let len = u32::from_be_bytes(head) as usize;
    if len > max {
        return Err(FrameError::TooLarge { len, max });
    }
    let mut body = vec![0u8; len];
    rd.read_exact(&mut body).await.map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => FrameError::Truncated,
        _ => FrameError::Io(e),
    })?;
    Ok(Some(body))
}

/// Decode a frame body into `T`, classifying failures as the protocol requires.
///
/// `known` lists the `type` values `T` accepts; a map whose `type` is not among them is
/// [`DecodeError::UnknownType`].
pub fn decode<T: DeserializeOwned>(body: &[u8], known: &[&str]) -> Result<T, DecodeError> {
    let value = decode_value(body)?;
    let rmpv::Value::Map(entries) = &value else {
        return Err(DecodeError::Malformed("message is not a map".into()));
    };
    let id = || field(entries, "id").and_then(id_of);
    let kind = field(entries, "type")
        .and_then(|v| v.as_str())
        .ok_or_else(|| DecodeError::BadFields {
            message: "message has no string `type`".into(),
            id: id(),
        })?;
    if !known.contains(&kind) {
        return Err(DecodeError::UnknownType {
            kind: kind.to_owned(),
            id: id(),
        });
    }
    let mut de = rmp_serde::Deserializer::from_read_ref(body);
    // The value pass above enforced MAX_DEPTH; this only has to not refuse it.
    de.set_max_depth(3 * MAX_DEPTH);
    T::deserialize(&mut de).map_err(|e| DecodeError::BadFields {
        message: format!("bad `{kind}` message: {e}"),
        id: id(),
    })
}

/// Parse a body as a generic MessagePack value with the depth cap, and check that
/// nothing trails it.
pub fn decode_value(body: &[u8]) -> Result<rmpv::Value, DecodeError> {
    let mut rd = body;
    // rmpv spends two or three units of its budget per level: this bound only keeps
    // the recursion short; the exact limit is checked on the value below.
    let value = rmpv::decode::read_value_with_max_depth(&mut rd, 3 * MAX_DEPTH)
        .map_err(|e| DecodeError::Malformed(format!("not valid MessagePack: {e}")))?;
    if nesting(&value) > MAX_DEPTH {
        return Err(DecodeError::Malformed(format!(
            "message nests deeper than {MAX_DEPTH} levels"
        )));
    }
    if !rd.is_empty() {
        return Err(DecodeError::Malformed(format!(
            "{} bytes after the message",
            rd.len()
        )));
    }
    Ok(value)
}

/// How many arrays and maps deep `v` goes (the outermost counts 1), iteratively.
fn nesting(v: &rmpv::Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(v, 1usize)];
    while let Some((v, d)) = stack.pop() {
        match v {
            rmpv::Value::Array(items) => {
                deepest = deepest.max(d);
                stack.extend(items.iter().map(|i| (i, d + 1)));
            }
            rmpv::Value::Map(entries) => {
                deepest = deepest.max(d);
                for (k, v) in entries {
                    stack.push((k, d + 1));
                    stack.push((v, d + 1));
                }
            }
            _ => {}
        }
    }
    deepest
}

fn field<'a>(entries: &'a [(rmpv::Value, rmpv::Value)], key: &str) -> Option<&'a rmpv::Value> {
    entries
        .iter()
        .find(|(k, _)| k.as_str() == Some(key))
        .map(|(_, v)| v)
}

fn id_of(v: &rmpv::Value) -> Option<crate::Id> {
    match v {
        rmpv::Value::String(s) => s.as_str().map(crate::Id::from),
        rmpv::Value::Integer(n) => n
            .as_i64()
            .map(crate::Id::Int)
            .or_else(|| n.as_u64().map(crate::Id::UInt)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{ClientMessage, KNOWN_CLIENT_TYPES};

    fn body(v: &rmpv::Value) -> Vec<u8> {
        let mut out = Vec::new();
        rmpv::encode::write_value(&mut out, v).unwrap();
        out
    }

    #[test]
    fn deep_nesting_is_an_error_not_an_abort() {
        let mut b = vec![0x91u8; 200_000];
        b.push(0xc0);
        let err = decode::<ClientMessage>(&b, KNOWN_CLIENT_TYPES).unwrap_err();
        assert!(matches!(err, DecodeError::Malformed(_)), "{err:?}");
    }

    /// A map nested `levels` deep in total (the message itself is level 1).
    fn nested(levels: usize) -> Vec<u8> {
        let mut v = rmpv::Value::Nil;
        for _ in 1..levels {
            v = rmpv::Value::Map(vec![("x".into(), v)]);
        }
        let msg = rmpv::Value::Map(vec![
            ("type".into(), "ping".into()),
            ("id".into(), "p".into()),
            ("deep".into(), v),
        ]);
        body(&msg)
    }

    #[test]
    fn nesting_up_to_32_levels_is_accepted_and_33_refused() {
        assert!(decode::<ClientMessage>(&nested(MAX_DEPTH), KNOWN_CLIENT_TYPES).is_ok());
        assert!(matches!(
            decode::<ClientMessage>(&nested(MAX_DEPTH + 1), KNOWN_CLIENT_TYPES),
            Err(DecodeError::Malformed(_))
        ));
    }

    #[test]
    fn lying_lengths_are_errors() {
        for b in [
            &[0xdd, 0xff, 0xff, 0xff, 0xff][..],
            &[0xdb, 0xff, 0xff, 0xff, 0xff],
        ] {
            assert!(matches!(
                decode::<ClientMessage>(b, KNOWN_CLIENT_TYPES),
                Err(DecodeError::Malformed(_))
            ));
        }
    }

    #[test]
    fn not_a_map_is_malformed_and_no_type_echoes_the_id() {
        let arr = body(&rmpv::Value::Array(vec![1.into()]));
        assert!(matches!(
            decode::<ClientMessage>(&arr, KNOWN_CLIENT_TYPES),
            Err(DecodeError::Malformed(_))
        ));
        for (fields, want) in [
            (vec![("id".into(), "x".into())], Some("x".into())),
            (
                vec![("type".into(), 3.into()), ("id".into(), 7.into())],
                Some(crate::Id::Int(7)),
            ),
            (vec![("id".into(), 1.5.into())], None),
        ] {
            match decode::<ClientMessage>(&body(&rmpv::Value::Map(fields)), KNOWN_CLIENT_TYPES) {
                Err(DecodeError::BadFields { id, .. }) => assert_eq!(id, want),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn unknown_type_and_bad_fields_are_told_apart() {
        let unknown = body(&rmpv::Value::Map(vec![("type".into(), "dance".into())]));
        assert_eq!(
            decode::<ClientMessage>(&unknown, KNOWN_CLIENT_TYPES),
            Err(DecodeError::UnknownType {
                kind: "dance".into(),
                id: None
            })
        );
        let unknown = body(&rmpv::Value::Map(vec![
            ("type".into(), "dance".into()),
            ("id".into(), (-4).into()),
        ]));
        assert_eq!(
            decode::<ClientMessage>(&unknown, KNOWN_CLIENT_TYPES),
            Err(DecodeError::UnknownType {
                kind: "dance".into(),
                id: Some(crate::Id::Int(-4))
            })
        );
        let bad = body(&rmpv::Value::Map(vec![
            ("type".into(), "call".into()),
            ("id".into(), "c1".into()),
            ("tool".into(), 5.into()),
        ]));
        match decode::<ClientMessage>(&bad, KNOWN_CLIENT_TYPES) {
            Err(DecodeError::BadFields { id, .. }) => assert_eq!(id, Some("c1".into())),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn oversized_length_is_refused_before_reading_the_body() {
        let mut input: &[u8] = &[0xff, 0xff, 0xff, 0xf0];
        match read_frame(&mut input, 1024).await {
            Err(FrameError::TooLarge { len, max }) => {
                assert_eq!((len, max), (0xffff_fff0, 1024))
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn truncated_frame_is_reported() {
        let mut input: &[u8] = &[0, 0, 0, 9, 1, 2];
        assert!(matches!(
            read_frame(&mut input, 1024).await,
            Err(FrameError::Truncated)
        ));
        let mut empty: &[u8] = &[];
        assert!(matches!(read_frame(&mut empty, 1024).await, Ok(None)));
    }
}
