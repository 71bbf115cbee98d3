[New LWP 891]
[New LWP 892]
[New LWP 893]
[New LWP 894]
[New LWP 895]
[New LWP 896]
[New LWP 897]
[New LWP 898]
[New LWP 899]
[New LWP 900]
[New LWP 901]
[New LWP 902]
[New LWP 903]
[New LWP 904]
[New LWP 905]
[New LWP 927]
[New LWP 931]
[New LWP 934]
[New LWP 935]
[New LWP 936]
[New LWP 937]
[New LWP 938]
[New LWP 939]
[New LWP 940]
[New LWP 941]
[New LWP 942]
[New LWP 943]
[New LWP 944]
[New LWP 945]
[New LWP 946]
[New LWP 947]
[Thread debugging using libthread_db enabled]
Using host libthread_db library "/lib/x86_64-linux-gnu/libthread_db.so.1".
[New Thread 0x7ff1a1fd5700 (LWP 1076)]
[New Thread 0x7feee396a6c0 (LWP 1078)]
[Thread 0x7ff1c8ff16c0 (LWP 905) exited]
[Thread 0x7ff1c97f26c0 (LWP 904) exited]
[Thread 0x7ff1c9ff36c0 (LWP 903) exited]
[Thread 0x7ff1ca7f46c0 (LWP 902) exited]
[Thread 0x7ff1caff56c0 (LWP 901) exited]
[Thread 0x7ff1cb7f66c0 (LWP 900) exited]
[Thread 0x7ff1cbff76c0 (LWP 899) exited]
[Thread 0x7ff1cc7f86c0 (LWP 898) exited]
[Thread 0x7ff1ccff96c0 (LWP 897) exited]
[Thread 0x7ff1cd7fa6c0 (LWP 896) exited]
[Thread 0x7ff1cdffb6c0 (LWP 895) exited]
[Thread 0x7ff1ce7fc6c0 (LWP 894) exited]
[Thread 0x7ff1ceffd6c0 (LWP 893) exited]
[Thread 0x7ff1cf7fe6c0 (LWP 892) exited]
[Thread 0x7ff1cffff6c0 (LWP 891) exited]
[Detaching after fork from child process 1080]
[Thread 0x7ff1a1fd5700 (LWP 1076) exited]

Thread 1 "python3" stopped.
0x00007ff19c7b960d in ?? () from /usr/local/nvidia/lib64/libcuda.so.1
  Id   Target Id                                         Frame 
* 1    Thread 0x7ff1f547f140 (LWP 884) "python3"         0x00007ff19c7b960d in ?? () from /usr/local/nvidia/lib64/libcuda.so.1
  17   Thread 0x7ff1112296c0 (LWP 927) "cuda00001c00008" 0x00007ff1f531b79d in poll () from /lib/x86_64-linux-gnu/libc.so.6
  18   Thread 0x7fef05e576c0 (LWP 931) "cuda-EvtHandlr"  0x00007ff1f5298e51 in ?? () from /lib/x86_64-linux-gnu/libc.so.6
  19   Thread 0x7ff1102096c0 (LWP 934) "hostcopy-stager" 0x00007ff1f532752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
  20   Thread 0x7feee5e476c0 (LWP 935) "hostcopy-stager" 0x00007ff1f532752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
  21   Thread 0x7feee5c466c0 (LWP 936) "hostcopy-stager" 0x00007ff1f532752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
  22   Thread 0x7feee5a456c0 (LWP 937) "hostcopy-stager" 0x00007ff1f532752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
  23   Thread 0x7feee58446c0 (LWP 938) "hostcopy-stager" 0x00007ff1f532752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
  24   Thread 0x7feee56436c0 (LWP 939) "hostcopy-stager" 0x00007ff1f532752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
  25   Thread 0x7feee54426c0 (LWP 940) "hostcopy-stager" 0x00007ff1f532752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
  26   Thread 0x7feee52416c0 (LWP 941) "hostcopy-stager" 0x00007ff1f532752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
  27   Thread 0x7feee50406c0 (LWP 942) "hostcopy-stager" 0x00007ff1f532752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
  28   Thread 0x7feee4e3f6c0 (LWP 943) "hostcopy-stager" 0x00007ff1f532752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
  29   Thread 0x7feee4c3e6c0 (LWP 944) "hostcopy-stager" 0x00007ff1f532752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
  30   Thread 0x7feee4a3d6c0 (LWP 945) "hostcopy-stager" 0x00007ff1f532752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
  31   Thread 0x7feee483c6c0 (LWP 946) "hostcopy-copier" 0x00007ff1f532752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
  32   Thread 0x7feee463b6c0 (LWP 947) "hostcopy-start"  0x00007ff1f5298d17 in ?? () from /lib/x86_64-linux-gnu/libc.so.6
  34   Thread 0x7feee396a6c0 (LWP 1078) "python3"        0x00007ff1f532a2d2 in epoll_wait () from /lib/x86_64-linux-gnu/libc.so.6

Thread 34 (Thread 0x7feee396a6c0 (LWP 1078) "python3"):
#0  0x00007ff1f532a2d2 in epoll_wait () from /lib/x86_64-linux-gnu/libc.so.6
#1  0x00007feee3e99796 in ?? () from /usr/local/nvidia/lib64/libcudadebugger.so.1
#2  0x00007feee3e96cf9 in ?? () from /usr/local/nvidia/lib64/libcudadebugger.so.1
#3  0x00007feee3e98d5a in ?? () from /usr/local/nvidia/lib64/libcudadebugger.so.1
#4  0x00007feee3ea388a in ?? () from /usr/local/nvidia/lib64/libcudadebugger.so.1
#5  0x00007feee3ea3d9b in ?? () from /usr/local/nvidia/lib64/libcudadebugger.so.1
#6  0x00007feee3e5c90d in ?? () from /usr/local/nvidia/lib64/libcudadebugger.so.1
#7  0x00007feee40b1dfd in ?? () from /usr/local/nvidia/lib64/libcudadebugger.so.1
#8  0x00007ff1f529cb84 in ?? () from /lib/x86_64-linux-gnu/libc.so.6
#9  0x00007ff1f5329ecc in ?? () from /lib/x86_64-linux-gnu/libc.so.6

Thread 32 (Thread 0x7feee463b6c0 (LWP 947) "hostcopy-start"):
#0  0x00007ff1f5298d17 in ?? () from /lib/x86_64-linux-gnu/libc.so.6
#1  0x00007ff1f52a341b in pthread_rwlock_wrlock () from /lib/x86_64-linux-gnu/libc.so.6
#2  0x00007ff19d352bb4 in ?? () from /usr/local/nvidia/lib64/libcuda.so.1
#3  0x00007ff19c5aa95f in ?? () from /usr/local/nvidia/lib64/libcuda.so.1
#4  0x00007ff19c713079 in ?? () from /usr/local/nvidia/lib64/libcuda.so.1
#5  0x00007ff19c703c00 in cuStreamCreate () from /usr/local/nvidia/lib64/libcuda.so.1
#6  0x00007ff1f0d915df in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#7  0x00007ff1f0d91235 in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#8  0x00007ff1f0d936ee in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#9  0x00007ff1f0d655a2 in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#10 0x00007ff1f0d7b6cc in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#11 0x00007ff1f0ddc97f in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#12 0x00007ff1f529cb84 in ?? () from /lib/x86_64-linux-gnu/libc.so.6
#13 0x00007ff1f5329ecc in ?? () from /lib/x86_64-linux-gnu/libc.so.6

Thread 31 (Thread 0x7feee483c6c0 (LWP 946) "hostcopy-copier"):
#0  0x00007ff1f532752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
#1  0x00007ff1f0dc7835 in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#2  0x00007ff1f0d8520e in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#3  0x00007ff1f0d652ac in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#4  0x00007ff1f0d7b12d in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#5  0x00007ff1f0ddc97f in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#6  0x00007ff1f529cb84 in ?? () from /lib/x86_64-linux-gnu/libc.so.6
#7  0x00007ff1f5329ecc in ?? () from /lib/x86_64-linux-gnu/libc.so.6

Thread 30 (Thread 0x7feee4a3d6c0 (LWP 945) "hostcopy-stager"):
#0  0x00007ff1f532752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
#1  0x00007ff1f0dc7835 in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#2  0x00007ff1f0d6ea6b in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#3  0x00007ff1f0d6546d in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#4  0x00007ff1f0d7b3ec in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#5  0x00007ff1f0ddc97f in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#6  0x00007ff1f529cb84 in ?? () from /lib/x86_64-linux-gnu/libc.so.6
#7  0x00007ff1f5329ecc in ?? () from /lib/x86_64-linux-gnu/libc.so.6

Thread 29 (Thread 0x7feee4c3e6c0 (LWP 944) "hostcopy-stager"):
#0  0x00007ff1f532752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
#1  0x00007ff1f0dc7835 in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#2  0x00007ff1f0d6ea6b in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#3  0x00007ff1f0d6546d in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#4  0x00007ff1f0d7b3ec in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#5  0x00007ff1f0ddc97f in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#6  0x00007ff1f529cb84 in ?? () from /lib/x86_64-linux-gnu/libc.so.6
#7  0x00007ff1f5329ecc in ?? () from /lib/x86_64-linux-gnu/libc.so.6

Thread 28 (Thread 0x7feee4e3f6c0 (LWP 943) "hostcopy-stager"):
#0  0x00007ff1f532752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
#1  0x00007ff1f0dc7835 in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#2  0x00007ff1f0d6ea6b in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#3  0x00007ff1f0d6546d in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#4  0x00007ff1f0d7b3ec in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#5  0x00007ff1f0ddc97f in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#6  0x00007ff1f529cb84 in ?? () from /lib/x86_64-linux-gnu/libc.so.6
#7  0x00007ff1f5329ecc in ?? () from /lib/x86_64-linux-gnu/libc.so.6

Thread 27 (Thread 0x7feee50406c0 (LWP 942) "hostcopy-stager"):
#0  0x00007ff1f532752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
#1  0x00007ff1f0dc7835 in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#2  0x00007ff1f0d6ea6b in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#3  0x00007ff1f0d6546d in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#4  0x00007ff1f0d7b3ec in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#5  0x00007ff1f0ddc97f in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#6  0x00007ff1f529cb84 in ?? () from /lib/x86_64-linux-gnu/libc.so.6
#7  0x00007ff1f5329ecc in ?? () from /lib/x86_64-linux-gnu/libc.so.6

Thread 26 (Thread 0x7feee52416c0 (LWP 941) "hostcopy-stager"):
#0  0x00007ff1f532752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
#1  0x00007ff1f0dc7835 in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#2  0x00007ff1f0d6ea6b in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#3  0x00007ff1f0d6546d in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#4  0x00007ff1f0d7b3ec in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#5  0x00007ff1f0ddc97f in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#6  0x00007ff1f529cb84 in ?? () from /lib/x86_64-linux-gnu/libc.so.6
#7  0x00007ff1f5329ecc in ?? () from /lib/x86_64-linux-gnu/libc.so.6

Thread 25 (Thread 0x7feee54426c0 (LWP 940) "hostcopy-stager"):
#0  0x00007ff1f532752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
#1  0x00007ff1f0dc7835 in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#2  0x00007ff1f0d6ea6b in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#3  0x00007ff1f0d6546d in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#4  0x00007ff1f0d7b3ec in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#5  0x00007ff1f0ddc97f in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#6  0x00007ff1f529cb84 in ?? () from /lib/x86_64-linux-gnu/libc.so.6
#7  0x00007ff1f5329ecc in ?? () from /lib/x86_64-linux-gnu/libc.so.6

Thread 24 (Thread 0x7feee56436c0 (LWP 939) "hostcopy-stager"):
#0  0x00007ff1f532752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
#1  0x00007ff1f0dc7835 in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#2  0x00007ff1f0d6ea6b in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#3  0x00007ff1f0d6546d in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#4  0x00007ff1f0d7b3ec in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#5  0x00007ff1f0ddc97f in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#6  0x00007ff1f529cb84 in ?? () from /lib/x86_64-linux-gnu/libc.so.6
#7  0x00007ff1f5329ecc in ?? () from /lib/x86_64-linux-gnu/libc.so.6

Thread 23 (Thread 0x7feee58446c0 (LWP 938) "hostcopy-stager"):
#0  0x00007ff1f532752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
#1  0x00007ff1f0dc7835 in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#2  0x00007ff1f0d6ea6b in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#3  0x00007ff1f0d6546d in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#4  0x00007ff1f0d7b3ec in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#5  0x00007ff1f0ddc97f in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#6  0x00007ff1f529cb84 in ?? () from /lib/x86_64-linux-gnu/libc.so.6
#7  0x00007ff1f5329ecc in ?? () from /lib/x86_64-linux-gnu/libc.so.6

Thread 22 (Thread 0x7feee5a456c0 (LWP 937) "hostcopy-stager"):
#0  0x00007ff1f532752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
#1  0x00007ff1f0dc7835 in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#2  0x00007ff1f0d6ea6b in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#3  0x00007ff1f0d6546d in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#4  0x00007ff1f0d7b3ec in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#5  0x00007ff1f0ddc97f in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#6  0x00007ff1f529cb84 in ?? () from /lib/x86_64-linux-gnu/libc.so.6
#7  0x00007ff1f5329ecc in ?? () from /lib/x86_64-linux-gnu/libc.so.6

Thread 21 (Thread 0x7feee5c466c0 (LWP 936) "hostcopy-stager"):
#0  0x00007ff1f532752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
#1  0x00007ff1f0dc7835 in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#2  0x00007ff1f0d6ea6b in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#3  0x00007ff1f0d6546d in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#4  0x00007ff1f0d7b3ec in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#5  0x00007ff1f0ddc97f in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#6  0x00007ff1f529cb84 in ?? () from /lib/x86_64-linux-gnu/libc.so.6
#7  0x00007ff1f5329ecc in ?? () from /lib/x86_64-linux-gnu/libc.so.6

Thread 20 (Thread 0x7feee5e476c0 (LWP 935) "hostcopy-stager"):
#0  0x00007ff1f532752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
#1  0x00007ff1f0dc7835 in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#2  0x00007ff1f0d6ea6b in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#3  0x00007ff1f0d6546d in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#4  0x00007ff1f0d7b3ec in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#5  0x00007ff1f0ddc97f in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#6  0x00007ff1f529cb84 in ?? () from /lib/x86_64-linux-gnu/libc.so.6
#7  0x00007ff1f5329ecc in ?? () from /lib/x86_64-linux-gnu/libc.so.6

Thread 19 (Thread 0x7ff1102096c0 (LWP 934) "hostcopy-stager"):
#0  0x00007ff1f532752d in syscall () from /lib/x86_64-linux-gnu/libc.so.6
#1  0x00007ff1f0dc7835 in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#2  0x00007ff1f0d6ea6b in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#3  0x00007ff1f0d6546d in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#4  0x00007ff1f0d7b3ec in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#5  0x00007ff1f0ddc97f in ?? () from /tmp/tmp.fWxC7vIRkC/hostcopy/_native.abi3.so
#6  0x00007ff1f529cb84 in ?? () from /lib/x86_64-linux-gnu/libc.so.6
#7  0x00007ff1f5329ecc in ?? () from /lib/x86_64-linux-gnu/libc.so.6

Thread 18 (Thread 0x7fef05e576c0 (LWP 931) "cuda-EvtHandlr"):
#0  0x00007ff1f5298e51 in ?? () from /lib/x86_64-linux-gnu/libc.so.6
#1  0x00007ff1f529b8cd in pthread_cond_wait () from /lib/x86_64-linux-gnu/libc.so.6
#2  0x00007feee3e96ddb in ?? () from /usr/local/nvidia/lib64/libcudadebugger.so.1
#3  0x00007feee3e98d5a in ?? () from /usr/local/nvidia/lib64/libcudadebugger.so.1
#4  0x00007feee3c7e1fd in ?? () from /usr/local/nvidia/lib64/libcudadebugger.so.1
#5  0x00007feee3ce0939 in ?? () from /usr/local/nvidia/lib64/libcudadebugger.so.1
#6  0x00007feee3a7c4dc in ?? () from /usr/local/nvidia/lib64/libcudadebugger.so.1
#7  0x00007feee3d992a6 in ?? () from /usr/local/nvidia/lib64/libcudadebugger.so.1
#8  0x00007ff19d30493b in ?? () from /usr/local/nvidia/lib64/libcuda.so.1
#9  0x00007ff19c7ba9c4 in ?? () from /usr/local/nvidia/lib64/libcuda.so.1
#10 0x00007ff19c6bad73 in ?? () from /usr/local/nvidia/lib64/libcuda.so.1
#11 0x00007ff1f529cb84 in ?? () from /lib/x86_64-linux-gnu/libc.so.6
#12 0x00007ff1f5329ecc in ?? () from /lib/x86_64-linux-gnu/libc.so.6

Thread 17 (Thread 0x7ff1112296c0 (LWP 927) "cuda00001c00008"):
#0  0x00007ff1f531b79d in poll () from /lib/x86_64-linux-gnu/libc.so.6
#1  0x00007ff19c6cdf27 in ?? () from /usr/local/nvidia/lib64/libcuda.so.1
#2  0x00007ff19c7ba967 in ?? () from /usr/local/nvidia/lib64/libcuda.so.1
#3  0x00007ff19c6bad73 in ?? () from /usr/local/nvidia/lib64/libcuda.so.1
#4  0x00007ff1f529cb84 in ?? () from /lib/x86_64-linux-gnu/libc.so.6
#5  0x00007ff1f5329ecc in ?? () from /lib/x86_64-linux-gnu/libc.so.6

Thread 1 (Thread 0x7ff1f547f140 (LWP 884) "python3"):
#0  0x00007ff19c7b960d in ?? () from /usr/local/nvidia/lib64/libcuda.so.1
#1  0x00007ff19d352040 in ?? () from /usr/local/nvidia/lib64/libcuda.so.1
#2  0x00007ff19c5dfe24 in ?? () from /usr/local/nvidia/lib64/libcuda.so.1
#3  0x00007ff19c7c9aed in ?? () from /usr/local/nvidia/lib64/libcuda.so.1
#4  0x00007ff19c7d133a in ?? () from /usr/local/nvidia/lib64/libcuda.so.1
#5  0x00007ff19c7d1a65 in ?? () from /usr/local/nvidia/lib64/libcuda.so.1
#6  0x00007ff19d3648e1 in ?? () from /usr/local/nvidia/lib64/libcuda.so.1
#7  0x00007ff19c58274c in ?? () from /usr/local/nvidia/lib64/libcuda.so.1
#8  0x00007ff19c582f3a in ?? () from /usr/local/nvidia/lib64/libcuda.so.1
#9  0x00007ff19c5838f4 in ?? () from /usr/local/nvidia/lib64/libcuda.so.1
#10 0x00007ff19c73375a in ?? () from /usr/local/nvidia/lib64/libcuda.so.1
#11 0x00007ff19c72f550 in cuMemcpyDtoHAsync_v2 () from /usr/local/nvidia/lib64/libcuda.so.1
#12 0x00007ff1c8442331 in ?? () from /opt/torch/.venv/lib/python3.12/site-packages/torch/lib/../../nvidia/cu13/lib/libcudart.so.13
#13 0x00007ff1c8416858 in ?? () from /opt/torch/.venv/lib/python3.12/site-packages/torch/lib/../../nvidia/cu13/lib/libcudart.so.13
#14 0x00007ff1c8470f6c in cudaMemcpyAsync () from /opt/torch/.venv/lib/python3.12/site-packages/torch/lib/../../nvidia/cu13/lib/libcudart.so.13
#15 0x00007ff1145abd30 in at::native::copy_kernel_cuda(at::TensorIterator&, bool) () from /opt/torch/.venv/lib/python3.12/site-packages/torch/lib/libtorch_cuda.so
#16 0x00007ff12ca4baad in at::native::copy_impl(at::Tensor&, at::Tensor const&, bool) [clone .isra.0] () from /opt/torch/.venv/lib/python3.12/site-packages/torch/lib/libtorch_cpu.so
#17 0x00007ff12ca4df57 in at::native::copy_(at::Tensor&, at::Tensor const&, bool) () from /opt/torch/.venv/lib/python3.12/site-packages/torch/lib/libtorch_cpu.so
#18 0x00007ff12d8c068a in at::_ops::copy_::call(at::Tensor&, at::Tensor const&, bool) () from /opt/torch/.venv/lib/python3.12/site-packages/torch/lib/libtorch_cpu.so
#19 0x00007ff12cde74d2 in at::native::_to_copy(at::Tensor const&, std::optional<c10::ScalarType>, std::optional<c10::Layout>, std::optional<c10::Device>, std::optional<bool>, bool, std::optional<c10::MemoryFormat>) () from /opt/torch/.venv/lib/python3.12/site-packages/torch/lib/libtorch_cpu.so
#20 0x00007ff12ddbca4c in c10::impl::wrap_kernel_functor_unboxed_<c10::impl::detail::WrapFunctionIntoFunctor_<c10::CompileTimeFunctionPointer<at::Tensor (at::Tensor const&, std::optional<c10::ScalarType>, std::optional<c10::Layout>, std::optional<c10::Device>, std::optional<bool>, bool, std::optional<c10::MemoryFormat>), &at::(anonymous namespace)::(anonymous namespace)::wrapper_CompositeExplicitAutograd___to_copy>, at::Tensor, c10::guts::typelist::typelist<at::Tensor const&, std::optional<c10::ScalarType>, std::optional<c10::Layout>, std::optional<c10::Device>, std::optional<bool>, bool, std::optional<c10::MemoryFormat> > >, at::Tensor (at::Tensor const&, std::optional<c10::ScalarType>, std::optional<c10::Layout>, std::optional<c10::Device>, std::optional<bool>, bool, std::optional<c10::MemoryFormat>)>::call(c10::OperatorKernel*, c10::DispatchKeySet, at::Tensor const&, std::optional<c10::ScalarType>, std::optional<c10::Layout>, std::optional<c10::Device>, std::optional<bool>, bool, std::optional<c10::MemoryFormat>) () from /opt/torch/.venv/lib/python3.12/site-packages/torch/lib/libtorch_cpu.so
#21 0x00007ff12d3949a2 in at::_ops::_to_copy::redispatch(c10::DispatchKeySet, at::Tensor const&, std::optional<c10::ScalarType>, std::optional<c10::Layout>, std::optional<c10::Device>, std::optional<bool>, bool, std::optional<c10::MemoryFormat>) () from /opt/torch/.venv/lib/python3.12/site-packages/torch/lib/libtorch_cpu.so
#22 0x00007ff12db1661b in c10::impl::wrap_kernel_functor_unboxed_<c10::impl::detail::WrapFunctionIntoFunctor_<c10::CompileTimeFunctionPointer<at::Tensor (at::Tensor const&, std::optional<c10::ScalarType>, std::optional<c10::Layout>, std::optional<c10::Device>, std::optional<bool>, bool, std::optional<c10::MemoryFormat>), &at::(anonymous namespace)::_to_copy>, at::Tensor, c10::guts::typelist::typelist<at::Tensor const&, std::optional<c10::ScalarType>, std::optional<c10::Layout>, std::optional<c10::Device>, std::optional<bool>, bool, std::optional<c10::MemoryFormat> > >, at::Tensor (at::Tensor const&, std::optional<c10::ScalarType>, std::optional<c10::Layout>, std::optional<c10::Device>, std::optional<bool>, bool, std::optional<c10::MemoryFormat>)>::call(c10::OperatorKernel*, c10::DispatchKeySet, at::Tensor const&, std::optional<c10::ScalarType>, std::optional<c10::Layout>, std::optional<c10::Device>, std::optional<bool>, bool, std::optional<c10::MemoryFormat>) () from /opt/torch/.venv/lib/python3.12/site-packages/torch/lib/libtorch_cpu.so
#23 0x00007ff12d3949a2 in at::_ops::_to_copy::redispatch(c10::DispatchKeySet, at::Tensor const&, std::optional<c10::ScalarType>, std::optional<c10::Layout>, std::optional<c10::Device>, std::optional<bool>, bool, std::optional<c10::MemoryFormat>) () from /opt/torch/.venv/lib/python3.12/site-packages/torch/lib/libtorch_cpu.so
#24 0x00007ff12fe89123 in torch::autograd::VariableType::(anonymous namespace)::_to_copy(c10::DispatchKeySet, at::Tensor const&, std::optional<c10::ScalarType>, std::optional<c10::Layout>, std::optional<c10::Device>, std::optional<bool>, bool, std::optional<c10::MemoryFormat>) () from /opt/torch/.venv/lib/python3.12/site-packages/torch/lib/libtorch_cpu.so
[Inferior 1 (process 884) detached]
