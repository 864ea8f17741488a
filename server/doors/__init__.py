"""What every agent door over a desktop shares (Cua's, the computer-use tools'): API-token
admission into a conversation, the target desktop by relay, kind and slot, and the call that
runs typed actions on it, finding the slot's session again after a restart."""
