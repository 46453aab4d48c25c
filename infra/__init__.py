"""The CDK app of Hermes Serverless Gateway: one stack, one construct per capability."""
