"""AWS glue shared by the Lambda handlers: configuration from Secrets Manager, and the
collaborators built once per Lambda container. No rule of the system lives here."""
