/* placeholder: removed when the first batcher source lands */
