"""The one error type of the engine and its kinds, shared by the worker, the client, Reply and
the loader above them."""

from __future__ import annotations

from enum import StrEnum


class ErrorKind(StrEnum):
    """Why a request failed. A StrEnum, so it pickles across the pipe and reads as text."""

    ERROR = "error"  # anything else: a bug or an unexpected llama.cpp failure
    BAD_MODEL = "bad_model"  # the file is not a model llama.cpp can load
    TOO_BIG = "too_big"  # the planner says it cannot fit this machine's memory
    CONTEXT = "context"  # the conversation does not fit the context
    TEMPLATE = "template"  # the chat template failed
    BUSY = "busy"  # another request holds the engine
    NO_MODEL = "no_model"  # nothing is loaded
    EXITED = "exited"  # the engine process died (crash, kill, out of memory)
    HUNG = "hung"  # the engine stopped answering and was ended
    CRASH_LOOP = "crash_loop"  # the model ended the engine too often: not reloaded by itself
    BAD_REQUEST = "bad_request"  # the request asked for something impossible (a bad schema)
    # A remote engine (deskllm.remote) failed; each message names the endpoint.
    AUTH = "auth"  # the endpoint refused the API key (401/403)
    UNREACHABLE = "unreachable"  # nothing answered at the endpoint's address
    TIMEOUT = "timeout"  # the endpoint took longer than the connect or read timeout
    DROPPED = "dropped"  # the connection closed mid-reply (the text so far is kept)
    REMOTE = "remote"  # the endpoint answered with an error of its own


class EngineError(RuntimeError):
    """A failure to report to the user as it is, with its kind."""

    def __init__(self, reason: str, kind: ErrorKind = ErrorKind.ERROR) -> None:
        super().__init__(reason)
        self.reason = reason
        self.kind = ErrorKind(kind)  # a kind read back from text (a stored reply) is checked


class EngineBusy(EngineError):
    def __init__(self) -> None:
        super().__init__("the engine is answering another request; wait or stop it", ErrorKind.BUSY)
