"""What the training stages share (train, instructor): the LoRA policy, the policy-gradient loss, the
progress lines, checkpoints a killed stage resumes from. Imported by stage bodies only."""
