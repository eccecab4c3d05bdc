BinputJsšõ~ZgV¢
±ÛA	££F'[4