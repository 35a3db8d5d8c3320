"""Reading beliefs: the one ``P = X`` parser, and the prior/posterior readers (elicit modes)."""
