"""SQLite store (sqlite-utils): migrations, conversations and messages, installed models."""

from deskllm.store.conversations import Conversation, ConversationStore, Message, ReplyWriter
from deskllm.store.db import DatabaseTooNew, open_database
from deskllm.store.library import InstalledModel, ModelLibrary

__all__ = [
    "Conversation",
    "ConversationStore",
    "DatabaseTooNew",
    "InstalledModel",
    "Message",
    "ModelLibrary",
    "ReplyWriter",
    "open_database",
]
