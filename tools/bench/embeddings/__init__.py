"""The embeddings bench: bytes of the sparse part of an update on shaped links.

Horovod with a replicated table (allgather of the rows touched) against a
sharded one (`es.sharded_embedding`, all-to-all), and a parameter-server
worker, counted on the rig's links beside the model's prediction
(prediction.py); see __main__.py for the command.
"""
