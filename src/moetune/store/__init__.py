"""What moetune keeps on disk: paths, hardware profiles, tuned profiles, saved bench results."""
