"""Event sources: each watches one thing and only posts hints into the mailbox."""
