"""Stand-ins for the AWS services parley's tests and benchmarks reach over loopback, where moto
and botocore's Stubber fall short (they need the h2 package of the test extras).

    sagemaker_runtime       InvokeEndpointWithResponseStream (HTTP/1.1 event stream), for botocore
    sagemaker_bidi_runtime  InvokeEndpointWithBidirectionalStream (HTTP/2 over TLS, SigV4 checked
                            event by event), for AWS's aws-sdk-sagemaker-runtime-http2 client
"""
