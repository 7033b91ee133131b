//! A small async client: connect, `hello`, send messages, read messages, and run a
//! call to its `result`. The CLI and the end-to-end tests use it.

use crate::frame::{self, FrameError};
use crate::message::{CallRequest, ClientMessage, KNOWN_SERVER_TYPES, ServerMessage, ToolResult};
use crate::{DEFAULT_MAX_FRAME_BYTES, Id, PROTOCOL_VERSION};
use std::collections::VecDeque;
use std::path::Path;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

/// Why a client could not talk to the supervisor. Each says which side failed, so the
/// CLI can tell "not running" from "refused" from "a bug".
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No supervisor listens at the socket (or it may not be opened).
    #[error("cannot connect to {path}: {source}")]
    Connect {
        /// The socket path tried.
        path: String,
        /// Why the connect failed.
        source: std::io::Error,
    },
    /// Reading or writing a frame failed.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// The server sent a frame this client cannot decode (a version mismatch).
    #[error("undecodable message from the server: {0}")]
    Decode(#[from] crate::DecodeError),
    /// The server hung up.
    #[error("the server closed the connection")]
    Closed,
    /// The server answered `hello` with an error.
    #[error("the server refused: {0:?}")]
    Refused(crate::ErrorBody),
    /// A message that makes no sense at this point of the exchange.
    #[error("unexpected message from the server: {0:?}")]
    Unexpected(Box<ServerMessage>),
}

/// Everything a call produced, in order.
#[derive(Debug, Default)]
pub struct CallTranscript {
    /// Streamed `output` chunks as `(stream, data)`, in arrival order.
    pub outputs: Vec<(String, String)>,
    /// The `confirm_required` messages the call raised (answered by someone else).
    pub confirmations: Vec<ServerMessage>,
    /// The call's `result`; `None` if the connection ended first.
    pub result: Option<ToolResult>,
}

/// Frames read off the socket. Bytes that are not yet a whole frame are kept here, not
/// on a reading future's stack, so a read given up half-way (a `select!` with a
/// keyboard or a timer) loses nothing: each await is one `read_buf`, which either
/// appended what it read or was cancelled having read nothing.
struct Frames {
    rd: OwnedReadHalf,
    partial: Vec<u8>,
}

impl Frames {
    /// The next frame's body; `None` when the server closed between frames.
    async fn next(&mut self) -> Result<Option<Vec<u8>>, FrameError> {
        loop {
            if let Some(body) = self.whole_frame()? {
                return Ok(Some(body));
            }
            self.partial.reserve(8192);
            if self.rd.read_buf(&mut self.partial).await? == 0 {
                return match self.partial.is_empty() {
                    true => Ok(None),
                    false => Err(FrameError::Truncated),
                };
            }
        }
    }

    /// A whole frame's body off the front of `partial`, if one is there.
    fn whole_frame(&mut self) -> Result<Option<Vec<u8>>, FrameError> {
        let Some(head) = self.partial.first_chunk::<4>() else {
            return Ok(None);
        };
        let len = u32::from_be_bytes(*head) as usize;
        if len > DEFAULT_MAX_FRAME_BYTES {
            return Err(FrameError::TooLarge {
                len,
                max: DEFAULT_MAX_FRAME_BYTES,
            });
        }
        if self.partial.len() < 4 + len {
            return Ok(None);
        }
        let body = self.partial[4..4 + len].to_vec();
        self.partial.drain(..4 + len);
        Ok(Some(body))
    }
}

/// One connection to the supervisor.
pub struct Client {
    frames: Frames,
    wr: OwnedWriteHalf,
    /// Messages read while waiting for something else.
    backlog: VecDeque<ServerMessage>,
    /// The session id from `welcome` (what audit records and events name).
    pub session: String,
}

impl Client {
    /// Connect and say `hello`.
    pub async fn connect(path: &Path, name: &str, interactive: bool) -> Result<Self, ClientError> {
        Self::connect_relaying(path, name, interactive, Vec::new()).await
    }

    /// Connect and say `hello`, answering the MCP servers' requests of `relay`
    /// (`sampling/createMessage`, `elicitation/create`) as `relay_request`s.
    pub async fn connect_relaying(
        path: &Path,
        name: &str,
        interactive: bool,
        relay: Vec<String>,
    ) -> Result<Self, ClientError> {
        let stream = UnixStream::connect(path)
            .await
            .map_err(|source| ClientError::Connect {
                path: path.display().to_string(),
                source,
            })?;
        let (rd, wr) = stream.into_split();
        let mut client = Client {
            frames: Frames {
                rd,
                partial: Vec::new(),
            },
            wr,
            backlog: VecDeque::new(),
            session: String::new(),
        };
        client
            .send(&ClientMessage::Hello {
                protocol: PROTOCOL_VERSION,
                client: name.to_owned(),
                interactive: Some(interactive),
                relay,
            })
            .await?;
        match client.recv().await? {
            ServerMessage::Welcome { session, .. } => client.session = session,
            ServerMessage::Error { error, .. } => return Err(ClientError::Refused(error)),
            other => return Err(ClientError::Unexpected(Box::new(other))),
        }
        Ok(client)
    }

    /// Send one message; answers are read with [`Client::recv`].
    pub async fn send(&mut self, msg: &ClientMessage) -> Result<(), ClientError> {
        crate::writer::write_message(&mut self.wr, msg).await?;
        Ok(())
    }

    /// Send bytes as they are (tests use this for malformed frames).
    pub async fn send_raw(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        self.wr.write_all(bytes).await.map_err(FrameError::Io)?;
        Ok(())
    }

    /// The next message, from the backlog first.
    pub async fn recv(&mut self) -> Result<ServerMessage, ClientError> {
        if let Some(m) = self.backlog.pop_front() {
            return Ok(m);
        }
        self.read_one().await
    }

    /// The next message from the socket (cancel-safe, see [`Frames`]).
    async fn read_one(&mut self) -> Result<ServerMessage, ClientError> {
        let body = self.frames.next().await?.ok_or(ClientError::Closed)?;
        Ok(frame::decode(&body, KNOWN_SERVER_TYPES)?)
    }

    /// Read until `pick` accepts a message; the others wait in the backlog.
    pub async fn recv_matching<T>(
        &mut self,
        mut pick: impl FnMut(&ServerMessage) -> Option<T>,
    ) -> Result<(T, ServerMessage), ClientError> {
        if let Some(pos) = self.backlog.iter().position(|m| pick(m).is_some()) {
            let m = self.backlog.remove(pos).ok_or(ClientError::Closed)?;
            let t = pick(&m).ok_or(ClientError::Closed)?;
            return Ok((t, m));
        }
        loop {
            let m = self.read_one().await?;
            if let Some(t) = pick(&m) {
                return Ok((t, m));
            }
            self.backlog.push_back(m);
        }
    }

    /// Send a request with an `id` and wait for the answer that echoes it.
    pub async fn request(
        &mut self,
        msg: &ClientMessage,
        id: &Id,
    ) -> Result<ServerMessage, ClientError> {
        self.send(msg).await?;
        let (_, m) = self.recv_matching(|m| answers(m, id).then_some(())).await?;
        Ok(m)
    }

    /// Run one call to its result; `output` sees streamed output as it arrives.
    pub async fn call(
        &mut self,
        req: CallRequest,
        mut output: impl FnMut(&str, &str),
    ) -> Result<CallTranscript, ClientError> {
        let id = req.id.clone();
        self.send(&ClientMessage::Call(req)).await?;
        let mut t = CallTranscript::default();
        loop {
            let (_, m) = self
                .recv_matching(|m| belongs_to_call(m, &id).then_some(()))
                .await?;
            match m {
                ServerMessage::Output { stream, data, .. } => {
                    output(&stream, &data);
                    t.outputs.push((stream, data));
                }
                ServerMessage::Result(r) => {
                    t.result = Some(r);
                    return Ok(t);
                }
                ServerMessage::Error { error, .. } => return Err(ClientError::Refused(error)),
                other => t.confirmations.push(other),
            }
        }
    }
}

/// The sending half of a [`Client::split`] connection.
pub struct Sender {
    wr: OwnedWriteHalf,
}

impl Sender {
    /// Write one message as a frame.
    pub async fn send(&mut self, msg: &ClientMessage) -> Result<(), ClientError> {
        let bytes = frame::encode(msg)?;
        self.wr.write_all(&bytes).await.map_err(FrameError::Io)?;
        Ok(())
    }
}

/// Messages of a [`Client::split`] connection; the last item is the error that ended it.
pub type Incoming = tokio::sync::mpsc::Receiver<Result<ServerMessage, ClientError>>;

impl Client {
    /// Split into a sender and a channel of incoming messages, read by a task of their
    /// own. Waiting on the channel can be given up at any moment (in a `select!` with a
    /// keyboard or a timer) without losing part of a frame, which reading the socket
    /// directly could. Messages already read come first. Needs a tokio runtime.
    pub fn split(self) -> (Sender, Incoming) {
        let Client {
            mut frames,
            wr,
            backlog,
            ..
        } = self;
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        tokio::spawn(async move {
            for m in backlog {
                if tx.send(Ok(m)).await.is_err() {
                    return;
                }
            }
            loop {
                // A message that does not decode leaves the stream in step (its frame
                // was whole): it is passed on and reading goes on.
                let (next, end) = match frames.next().await {
                    Ok(Some(body)) => (
                        frame::decode(&body, KNOWN_SERVER_TYPES).map_err(Into::into),
                        false,
                    ),
                    Ok(None) => (Err(ClientError::Closed), true),
                    Err(e) => (Err(e.into()), true),
                };
                if tx.send(next).await.is_err() || end {
                    return;
                }
            }
        });
        (Sender { wr }, rx)
    }
}

/// Whether `m` is the answer to a request with id `id`.
pub fn answers(m: &ServerMessage, id: &Id) -> bool {
    match m {
        ServerMessage::Tools { id: i, .. }
        | ServerMessage::Result(crate::ToolResult { id: i, .. })
        | ServerMessage::BatchDone { id: i, .. }
        | ServerMessage::Token { id: i, .. }
        | ServerMessage::Subscribed { id: i }
        | ServerMessage::Status { id: i, .. }
        | ServerMessage::Ack { id: i }
        | ServerMessage::Pong { id: i } => i == id,
        ServerMessage::Error { id: Some(i), .. } => i == id,
        ServerMessage::Explanation { id: i, .. } | ServerMessage::Undone { id: i, .. } => i == id,
        _ => false,
    }
}

fn belongs_to_call(m: &ServerMessage, id: &Id) -> bool {
    match m {
        ServerMessage::Output { id: i, .. }
        | ServerMessage::ConfirmRequired { id: i, .. }
        | ServerMessage::RelayRequest { id: i, .. } => i == id,
        other => answers(other, id),
    }
}
