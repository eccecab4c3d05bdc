BoutputJgVsö£¢
[4Å£