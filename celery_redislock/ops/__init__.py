"""Operations: the CLI, the inventory of keys, the stats counters and the inspect command."""
