//! Claude Code marketplaces (see below).
