"""SQLite store (sqlite-utils): migrations, conversations and messages, installed models."""

from deskllm.database.connection import DatabaseTooNew, open_database
from deskllm.store.conversations import Conversation, ConversationStore, Message, ReplyWriter
from deskllm.store.library import InstalledModel, ModelLibrary, ModelNotFound

__all__ = [
    "Conversation",
    "ConversationStore",
    "DatabaseTooNew",
    "InstalledModel",
    "Message",
    "ModelLibrary",
    "ModelNotFound",
    "ReplyWriter",
    "open_database",
]
