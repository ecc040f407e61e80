"""Jobs that run things: `run` and `bench` (on one launch spec and one device set-up),
`doctor` and `alias`. They return data; report/ renders it."""
