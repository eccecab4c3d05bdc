BoutputJ`ωΤp’kb±#θ…O¤ί„ότTμ1RL΄UB
χόΠ±tω/¤gπ.w¤mKίε›mv_IΙ0]TΒΆ•P
JK§³ΆDτΎQάφYP0ÿf?zΜζ=