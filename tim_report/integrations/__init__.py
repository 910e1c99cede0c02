"""The few lines a training framework needs to save each step for tim-report (docs/integrations.md).

    verl.save_dataproto(batch, "tim_steps/")            a DataProto after the old log-probs (RayPPOTrainer.fit)
    trl.TimReportCallback(trainer, "tim_steps/")       TRL's GRPOTrainer, every generation batch
    openrlhf.save_experiences(experiences, "tim_steps/", step=global_step)   OpenRLHF's Experience list

Each reads the framework's objects by their attribute and key names (checked against the framework's source,
cited in each module) and calls `tim_report.save_step`; none imports the framework it serves.
"""
