"""Everything that talks to the llama.cpp binaries: what they say about themselves (info),
finding, launching and stopping them (process), their logs (log), their HTTP API (client), and
the device memory a running server uses (memprobe)."""
