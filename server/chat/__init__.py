"""Chat: conversations, the transcript, and ``/desktop`` slash commands."""
