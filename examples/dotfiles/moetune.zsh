# moetune in ~/.zshrc: tuned llama-server commands, one shell function each.
#
# Keep each generated function in its own file, rewritten whenever you re-tune:
#   moetune run ~/models/Qwen3-30B-A3B-Q4_K_M.gguf
#   mkdir -p ~/.config/moetune/aliases
#   moetune alias qwen ~/models/Qwen3-30B-A3B-Q4_K_M.gguf --shell zsh > ~/.config/moetune/aliases/qwen.zsh
# and source them all here ((N): no error when there are none):
for moetune_alias in "${XDG_CONFIG_HOME:-$HOME/.config}"/moetune/aliases/*.zsh(N); do
    source "$moetune_alias"
done
unset moetune_alias

# What `moetune alias qwen MODEL --shell zsh` prints (an example: your paths, N and figures
# differ). Extra arguments go to llama-server: `qwen --port 8081 --host 0.0.0.0`.
# moetune: Qwen3-30B-A3B-Q4_K_M.gguf on NVIDIA GeForce RTX 4090 (23.99 GiB), llama.cpp build 6500 (abc1234)
# tuned 2025-01-01T00:00:00+00:00: --n-cpu-moe 12, ctx 32768 q8_0/q8_0, peak 21.00 GiB, 41.5 tok/s
# after a new GPU, model file or llama.cpp: moetune run /home/me/models/Qwen3-30B-A3B-Q4_K_M.gguf --retune, then moetune alias qwen again
qwen() {
    /usr/local/bin/llama-server -m /home/me/models/Qwen3-30B-A3B-Q4_K_M.gguf -ngl 99 -fa on -ctk q8_0 -ctv q8_0 -c 32768 --n-cpu-moe 12 -t 8 --fit off "$@"
}

# Re-check the machine after a driver, BIOS or WSL change (PCIe link, RAM, swap):
alias moetune-check='moetune doctor'
