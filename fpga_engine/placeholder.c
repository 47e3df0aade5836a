/* placeholder: removed when engine.c lands */
