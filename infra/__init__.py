"""CDK for Terraform app that provisions the Vertex AI training platform (see infra/README.md).

Importing this package is cheap: `infra.config` and `infra.outputs` are pure (stdlib + yaml) so the job runner
can read environment configs and outputs without loading the CDK. Only `infra.cdk` and the construct modules
import it.
"""
