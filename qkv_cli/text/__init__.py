"""Text in: tokenizers (word, the shipped BPE, any tokenizer.json), reading inputs (TEXT, files, stdin, context,
mask files) with every read bounded, and the sample texts. Imports only core."""
