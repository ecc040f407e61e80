def test_an_rpc_buffer_type_named_otherwise_than_its_device_gets_a_note() -> None:
    from moetune.core.command import buft_notes

    argv = [
        *("llama-server", "--rpc", "127.0.0.1:50052,127.0.0.1:50053"),
        *("-ot", r"blk\.(2|3)\.ffn_.*_exps=RPC0[127.0.0.1:50053],blk\.[4-7]\.ffn_.*_exps=CPU"),
        *("-ot", r"blk\.1\.ffn_.*_exps=RPC0[127.0.0.1:50052]"),
    ]
    assert buft_notes(argv) == [
        "-ot's RPC0[127.0.0.1:50053] is llama.cpp's buffer-type name of RPC1 (127.0.0.1:50053)"
    ]
    assert buft_notes(["llama-server", "--n-cpu-moe", "3"]) == []
