#!/bin/sh
# being written (ingest)
exit 0
