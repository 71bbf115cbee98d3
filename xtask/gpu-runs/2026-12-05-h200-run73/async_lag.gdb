[New LWP 1097]
[New LWP 1098]
[New LWP 1099]
[New LWP 1100]
[New LWP 1101]
[New LWP 1102]
[New LWP 1103]
[New LWP 1104]
[New LWP 1105]
[New LWP 1106]
[New LWP 1107]
[New LWP 1108]
[New LWP 1109]
[New LWP 1110]
[New LWP 1111]
[New LWP 1128]
[New LWP 1134]
[New LWP 1137]
[New LWP 1138]
[New LWP 1139]
[New LWP 1140]
[New LWP 1141]
[New LWP 1142]
[New LWP 1143]
[New LWP 1144]
[New LWP 1145]
[New LWP 1146]
[New LWP 1147]
[New LWP 1148]
[New LWP 1149]
[New LWP 1150]
[New LWP 1151]
[Thread debugging using libthread_db enabled]
Using host libthread_db library "/lib/x86_64-linux-gnu/libthread_db.so.1".
[New Thread 0x7fb6a69d5700 (LWP 1374)]
[New Thread 0x7fade752e6c0 (LWP 1375)]
[Thread 0x7fb6ce3f26c0 (LWP 1110) exited]
[Thread 0x7fb6cdbf16c0 (LWP 1111) exited]
[Thread 0x7fb6cebf36c0 (LWP 1109) exited]
[Thread 0x7fb6cf3f46c0 (LWP 1108) exited]
[Thread 0x7fb6cfbf56c0 (LWP 1107) exited]
[Thread 0x7fb6d03f66c0 (LWP 1106) exited]
[Thread 0x7fb6d0bf76c0 (LWP 1105) exited]
[Thread 0x7fb6d13f86c0 (LWP 1104) exited]
[Thread 0x7fb6d1bf96c0 (LWP 1103) exited]
[Thread 0x7fb6d23fa6c0 (LWP 1102) exited]
[Thread 0x7fb6d2bfb6c0 (LWP 1101) exited]
[Thread 0x7fb6d33fc6c0 (LWP 1100) exited]
[Thread 0x7fb6d3bfd6c0 (LWP 1099) exited]
[Thread 0x7fb6d43fe6c0 (LWP 1098) exited]
[Thread 0x7fb6d4bff6c0 (LWP 1097) exited]
[Detaching after fork from child process 1376]
[Thread 0x7fb6a69d5700 (LWP 1374) exited]

Thread 1 "python3" stopped.
0x00007fb6f8f2a2d2 in epoll_wait () from /lib/x86_64-linux-gnu/libc.so.6
  Id   Target Id                                          Frame 
* 1    Thread 0x7fb6f91e8140 (LWP 1094) "python3"         0x00007fb6f8f2a2d2 in epoll_wait () from /lib/x86_64-linux-gnu/libc.so.6
  17   Thread 0x7fb615a176c0 (LWP 1128) "cuda00001400006" 0x00007fb6f8f1b79d in poll () from /lib/x86_64-linux-gnu/libc.so.6
  18   Thread 0x7fb614f836c0 (LWP 1134) "cuda-EvtHandlr"  0x00007fb6f8e98e51 in ?? () from /lib/x86_64-linux-gnu/libc.so.6
  19   Thread 0x7fb4083256c0 (LWP 1137) "hostcopy-stager" 0x00007fb6f8f2752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
  20   Thread 0x7fb39c7f16c0 (LWP 1138) "hostcopy-stager" 0x00007fb6f8f2752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
  21   Thread 0x7fb39c5f06c0 (LWP 1139) "hostcopy-stager" 0x00007fb6f8f2752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
  22   Thread 0x7fb39c3ef6c0 (LWP 1140) "hostcopy-stager" 0x00007fb6f8f2752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
  23   Thread 0x7fb2cbffe6c0 (LWP 1141) "hostcopy-stager" 0x00007fb6f8f2752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
  24   Thread 0x7fb2cbdfd6c0 (LWP 1142) "hostcopy-stager" 0x00007fb6f8f2752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
  25   Thread 0x7fb2cbbfc6c0 (LWP 1143) "hostcopy-stager" 0x00007fb6f8f2752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
  26   Thread 0x7fb2cb9fb6c0 (LWP 1144) "hostcopy-stager" 0x00007fb6f8f2752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
  27   Thread 0x7fb2cb7fa6c0 (LWP 1145) "hostcopy-stager" 0x00007fb6f8f2752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
  28   Thread 0x7fb2cb5f96c0 (LWP 1146) "hostcopy-stager" 0x00007fb6f8f2752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
  29   Thread 0x7fb2cb3f86c0 (LWP 1147) "hostcopy-stager" 0x00007fb6f8f2752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
  30   Thread 0x7fb2cb1f76c0 (LWP 1148) "hostcopy-stager" 0x00007fb6f8f2752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
  31   Thread 0x7fb2caff66c0 (LWP 1149) "hostcopy-copier" 0x00007fb6a12148a1 in ?? () from /usr/local/nvidia/lib64/libcuda.so.1
  32   Thread 0x7fb2cadf56c0 (LWP 1150) "hostcopy-start"  0x00007fb6f8f2752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
  33   Thread 0x7fb2cabf46c0 (LWP 1151) "hostcopy-await"  0x00007fb6f8f2752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
  35   Thread 0x7fade752e6c0 (LWP 1375) "python3"         0x00007fb6f8f2a2d2 in epoll_wait () from /lib/x86_64-linux-gnu/libc.so.6

Thread 35 (Thread 0x7fade752e6c0 (LWP 1375) "python3"):
#0  0x00007fb6f8f2a2d2 in epoll_wait () from /lib/x86_64-linux-gnu/libc.so.6
#1  0x00007fade7a5d796 in ?? () from /usr/local/nvidia/lib64/libcudadebugger.so.1
#2  0x00007fade7a5acf9 in ?? () from /usr/local/nvidia/lib64/libcudadebugger.so.1
#3  0x00007fade7a5cd5a in ?? () from /usr/local/nvidia/lib64/libcudadebugger.so.1
#4  0x00007fade7a6788a in ?? () from /usr/local/nvidia/lib64/libcudadebugger.so.1
#5  0x00007fade7a67d9b in ?? () from /usr/local/nvidia/lib64/libcudadebugger.so.1
#6  0x00007fade7a2090d in ?? () from /usr/local/nvidia/lib64/libcudadebugger.so.1
#7  0x00007fade7c75dfd in ?? () from /usr/local/nvidia/lib64/libcudadebugger.so.1
#8  0x00007fb6f8e9cb84 in ?? () from /lib/x86_64-linux-gnu/libc.so.6
#9  0x00007fb6f8f29ecc in ?? () from /lib/x86_64-linux-gnu/libc.so.6

Thread 33 (Thread 0x7fb2cabf46c0 (LWP 1151) "hostcopy-await"):
#0  0x00007fb6f8f2752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
#1  0x00007fb615af1835 in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#2  0x00007fb615aaf839 in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#3  0x00007fb615ab066b in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#4  0x00007fb615abdd91 in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#5  0x00007fb615a8f641 in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#6  0x00007fb615aa555c in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#7  0x00007fb615b0697f in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#8  0x00007fb6f8e9cb84 in ?? () from /lib/x86_64-linux-gnu/libc.so.6
#9  0x00007fb6f8f29ecc in ?? () from /lib/x86_64-linux-gnu/libc.so.6

Thread 32 (Thread 0x7fb2cadf56c0 (LWP 1150) "hostcopy-start"):
#0  0x00007fb6f8f2752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
#1  0x00007fb615af1835 in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#2  0x00007fb615abd56e in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#3  0x00007fb615a8f5a2 in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#4  0x00007fb615aa56cc in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#5  0x00007fb615b0697f in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#6  0x00007fb6f8e9cb84 in ?? () from /lib/x86_64-linux-gnu/libc.so.6
#7  0x00007fb6f8f29ecc in ?? () from /lib/x86_64-linux-gnu/libc.so.6

Thread 31 (Thread 0x7fb2caff66c0 (LWP 1149) "hostcopy-copier"):
#0  0x00007fb6a12148a1 in ?? () from /usr/local/nvidia/lib64/libcuda.so.1
#1  0x00007fb6a0fd36c3 in ?? () from /usr/local/nvidia/lib64/libcuda.so.1
#2  0x00007fb6a10121bb in ?? () from /usr/local/nvidia/lib64/libcuda.so.1
#3  0x00007fb6a1d51f17 in ?? () from /usr/local/nvidia/lib64/libcuda.so.1
#4  0x00007fb6a1d52365 in ?? () from /usr/local/nvidia/lib64/libcuda.so.1
#5  0x00007fb6a0fdfe24 in ?? () from /usr/local/nvidia/lib64/libcuda.so.1
#6  0x00007fb6a1035942 in ?? () from /usr/local/nvidia/lib64/libcuda.so.1
#7  0x00007fb6a1117bfc in ?? () from /usr/local/nvidia/lib64/libcuda.so.1
#8  0x00007fb6a11050b0 in cuEventSynchronize () from /usr/local/nvidia/lib64/libcuda.so.1
#9  0x00007fb615a8c8ef in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#10 0x00007fb615a8c34b in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#11 0x00007fb615aaf27b in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#12 0x00007fb615a8f2ac in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#13 0x00007fb615aa512d in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#14 0x00007fb615b0697f in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#15 0x00007fb6f8e9cb84 in ?? () from /lib/x86_64-linux-gnu/libc.so.6
#16 0x00007fb6f8f29ecc in ?? () from /lib/x86_64-linux-gnu/libc.so.6

Thread 30 (Thread 0x7fb2cb1f76c0 (LWP 1148) "hostcopy-stager"):
#0  0x00007fb6f8f2752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
#1  0x00007fb615af1835 in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#2  0x00007fb615a98a6b in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#3  0x00007fb615a8f46d in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#4  0x00007fb615aa53ec in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#5  0x00007fb615b0697f in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#6  0x00007fb6f8e9cb84 in ?? () from /lib/x86_64-linux-gnu/libc.so.6
#7  0x00007fb6f8f29ecc in ?? () from /lib/x86_64-linux-gnu/libc.so.6

Thread 29 (Thread 0x7fb2cb3f86c0 (LWP 1147) "hostcopy-stager"):
#0  0x00007fb6f8f2752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
#1  0x00007fb615af1835 in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#2  0x00007fb615a98a6b in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#3  0x00007fb615a8f46d in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#4  0x00007fb615aa53ec in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#5  0x00007fb615b0697f in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#6  0x00007fb6f8e9cb84 in ?? () from /lib/x86_64-linux-gnu/libc.so.6
#7  0x00007fb6f8f29ecc in ?? () from /lib/x86_64-linux-gnu/libc.so.6

Thread 28 (Thread 0x7fb2cb5f96c0 (LWP 1146) "hostcopy-stager"):
#0  0x00007fb6f8f2752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
#1  0x00007fb615af1835 in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#2  0x00007fb615a98a6b in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#3  0x00007fb615a8f46d in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#4  0x00007fb615aa53ec in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#5  0x00007fb615b0697f in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#6  0x00007fb6f8e9cb84 in ?? () from /lib/x86_64-linux-gnu/libc.so.6
#7  0x00007fb6f8f29ecc in ?? () from /lib/x86_64-linux-gnu/libc.so.6

Thread 27 (Thread 0x7fb2cb7fa6c0 (LWP 1145) "hostcopy-stager"):
#0  0x00007fb6f8f2752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
#1  0x00007fb615af1835 in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#2  0x00007fb615a98a6b in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#3  0x00007fb615a8f46d in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#4  0x00007fb615aa53ec in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#5  0x00007fb615b0697f in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#6  0x00007fb6f8e9cb84 in ?? () from /lib/x86_64-linux-gnu/libc.so.6
#7  0x00007fb6f8f29ecc in ?? () from /lib/x86_64-linux-gnu/libc.so.6

Thread 26 (Thread 0x7fb2cb9fb6c0 (LWP 1144) "hostcopy-stager"):
#0  0x00007fb6f8f2752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
#1  0x00007fb615af1835 in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#2  0x00007fb615a98a6b in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#3  0x00007fb615a8f46d in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#4  0x00007fb615aa53ec in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#5  0x00007fb615b0697f in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#6  0x00007fb6f8e9cb84 in ?? () from /lib/x86_64-linux-gnu/libc.so.6
#7  0x00007fb6f8f29ecc in ?? () from /lib/x86_64-linux-gnu/libc.so.6

Thread 25 (Thread 0x7fb2cbbfc6c0 (LWP 1143) "hostcopy-stager"):
#0  0x00007fb6f8f2752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
#1  0x00007fb615af1835 in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#2  0x00007fb615a98a6b in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#3  0x00007fb615a8f46d in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#4  0x00007fb615aa53ec in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#5  0x00007fb615b0697f in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#6  0x00007fb6f8e9cb84 in ?? () from /lib/x86_64-linux-gnu/libc.so.6
#7  0x00007fb6f8f29ecc in ?? () from /lib/x86_64-linux-gnu/libc.so.6

Thread 24 (Thread 0x7fb2cbdfd6c0 (LWP 1142) "hostcopy-stager"):
#0  0x00007fb6f8f2752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
#1  0x00007fb615af1835 in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#2  0x00007fb615a98a6b in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#3  0x00007fb615a8f46d in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#4  0x00007fb615aa53ec in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#5  0x00007fb615b0697f in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#6  0x00007fb6f8e9cb84 in ?? () from /lib/x86_64-linux-gnu/libc.so.6
#7  0x00007fb6f8f29ecc in ?? () from /lib/x86_64-linux-gnu/libc.so.6

Thread 23 (Thread 0x7fb2cbffe6c0 (LWP 1141) "hostcopy-stager"):
#0  0x00007fb6f8f2752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
#1  0x00007fb615af1835 in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#2  0x00007fb615a98a6b in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#3  0x00007fb615a8f46d in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#4  0x00007fb615aa53ec in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#5  0x00007fb615b0697f in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#6  0x00007fb6f8e9cb84 in ?? () from /lib/x86_64-linux-gnu/libc.so.6
#7  0x00007fb6f8f29ecc in ?? () from /lib/x86_64-linux-gnu/libc.so.6

Thread 22 (Thread 0x7fb39c3ef6c0 (LWP 1140) "hostcopy-stager"):
#0  0x00007fb6f8f2752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
#1  0x00007fb615af1835 in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#2  0x00007fb615a98a6b in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#3  0x00007fb615a8f46d in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#4  0x00007fb615aa53ec in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#5  0x00007fb615b0697f in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#6  0x00007fb6f8e9cb84 in ?? () from /lib/x86_64-linux-gnu/libc.so.6
#7  0x00007fb6f8f29ecc in ?? () from /lib/x86_64-linux-gnu/libc.so.6

Thread 21 (Thread 0x7fb39c5f06c0 (LWP 1139) "hostcopy-stager"):
#0  0x00007fb6f8f2752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
#1  0x00007fb615af1835 in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#2  0x00007fb615a98a6b in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#3  0x00007fb615a8f46d in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#4  0x00007fb615aa53ec in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#5  0x00007fb615b0697f in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#6  0x00007fb6f8e9cb84 in ?? () from /lib/x86_64-linux-gnu/libc.so.6
#7  0x00007fb6f8f29ecc in ?? () from /lib/x86_64-linux-gnu/libc.so.6

Thread 20 (Thread 0x7fb39c7f16c0 (LWP 1138) "hostcopy-stager"):
#0  0x00007fb6f8f2752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
#1  0x00007fb615af1835 in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#2  0x00007fb615a98a6b in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#3  0x00007fb615a8f46d in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#4  0x00007fb615aa53ec in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#5  0x00007fb615b0697f in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#6  0x00007fb6f8e9cb84 in ?? () from /lib/x86_64-linux-gnu/libc.so.6
#7  0x00007fb6f8f29ecc in ?? () from /lib/x86_64-linux-gnu/libc.so.6

Thread 19 (Thread 0x7fb4083256c0 (LWP 1137) "hostcopy-stager"):
#0  0x00007fb6f8f2752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
#1  0x00007fb615af1835 in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#2  0x00007fb615a98a6b in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#3  0x00007fb615a8f46d in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#4  0x00007fb615aa53ec in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#5  0x00007fb615b0697f in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#6  0x00007fb6f8e9cb84 in ?? () from /lib/x86_64-linux-gnu/libc.so.6
#7  0x00007fb6f8f29ecc in ?? () from /lib/x86_64-linux-gnu/libc.so.6

Thread 18 (Thread 0x7fb614f836c0 (LWP 1134) "cuda-EvtHandlr"):
#0  0x00007fb6f8e98e51 in ?? () from /lib/x86_64-linux-gnu/libc.so.6
#1  0x00007fb6f8e9b8cd in pthread_cond_wait () from /lib/x86_64-linux-gnu/libc.so.6
#2  0x00007fade7a5addb in ?? () from /usr/local/nvidia/lib64/libcudadebugger.so.1
#3  0x00007fade7a5cd5a in ?? () from /usr/local/nvidia/lib64/libcudadebugger.so.1
#4  0x00007fade78421fd in ?? () from /usr/local/nvidia/lib64/libcudadebugger.so.1
#5  0x00007fade78a4939 in ?? () from /usr/local/nvidia/lib64/libcudadebugger.so.1
#6  0x00007fade76404dc in ?? () from /usr/local/nvidia/lib64/libcudadebugger.so.1
#7  0x00007fade795d2a6 in ?? () from /usr/local/nvidia/lib64/libcudadebugger.so.1
#8  0x00007fb6a1d0493b in ?? () from /usr/local/nvidia/lib64/libcuda.so.1
#9  0x00007fb6a11ba9c4 in ?? () from /usr/local/nvidia/lib64/libcuda.so.1
#10 0x00007fb6a10bad73 in ?? () from /usr/local/nvidia/lib64/libcuda.so.1
#11 0x00007fb6f8e9cb84 in ?? () from /lib/x86_64-linux-gnu/libc.so.6
#12 0x00007fb6f8f29ecc in ?? () from /lib/x86_64-linux-gnu/libc.so.6

Thread 17 (Thread 0x7fb615a176c0 (LWP 1128) "cuda00001400006"):
#0  0x00007fb6f8f1b79d in poll () from /lib/x86_64-linux-gnu/libc.so.6
#1  0x00007fb6a10cdf27 in ?? () from /usr/local/nvidia/lib64/libcuda.so.1
#2  0x00007fb6a11ba967 in ?? () from /usr/local/nvidia/lib64/libcuda.so.1
#3  0x00007fb6a10bad73 in ?? () from /usr/local/nvidia/lib64/libcuda.so.1
#4  0x00007fb6f8e9cb84 in ?? () from /lib/x86_64-linux-gnu/libc.so.6
#5  0x00007fb6f8f29ecc in ?? () from /lib/x86_64-linux-gnu/libc.so.6

Thread 1 (Thread 0x7fb6f91e8140 (LWP 1094) "python3"):
#0  0x00007fb6f8f2a2d2 in epoll_wait () from /lib/x86_64-linux-gnu/libc.so.6
#1  0x00000000006d46d7 in ?? ()
#2  0x00000000005dab8a in _PyEval_EvalFrameDefault ()
#3  0x00000000005d55eb in PyEval_EvalCode ()
#4  0x00000000005d33dc in ?? ()
#5  0x0000000000581fed in ?? ()
#6  0x00000000005499b5 in PyObject_Vectorcall ()
#7  0x00000000005d710f in _PyEval_EvalFrameDefault ()
#8  0x00000000005d55eb in PyEval_EvalCode ()
#9  0x0000000000608733 in PyRun_StringFlags ()
#10 0x00000000006b40de in PyRun_SimpleStringFlags ()
#11 0x00000000006bcda1 in Py_RunMain ()
#12 0x00000000006bc7bd in Py_BytesMain ()
#13 0x00007fb6f8e2a1ca in ?? () from /lib/x86_64-linux-gnu/libc.so.6
#14 0x00007fb6f8e2a28b in __libc_start_main () from /lib/x86_64-linux-gnu/libc.so.6
#15 0x0000000000657a05 in _start ()
[Inferior 1 (process 1094) detached]
