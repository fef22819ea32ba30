"""The AWS side as code: the CloudFormation stack that builds what slurmscale needs in an
account (roles, launch templates, placement groups, the events queue with its policy and
rules, the private zone) rendered from slurmscale.yaml (`template.py`), the IAM policies it
grants (`policies.py`, from the shipped JSON documents), and the stack's outputs written back
into the config (`outputs.py`). docs/aws-stack.md tells the whole story."""
