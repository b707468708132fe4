"""Inside ``torch.onnx.export(dynamo=True)``: readable output names and translations for operators torchlib lacks."""
