# Writes the .o8 files of bench/hardening/defects.sh into DIR: huge.o8 (a valid model whose
# exact arena is 4.2 GB: a 1x1 conv to 65,535 channels padded by 111), lenet.o8 (a copy of
# LENET) and ffff.o8 (LENET with arena_bytes 0xFFFFFFFF and a valid CRC).
#   python3 mk_o8.py DIR LENET
import os, struct, sys, zlib
out, lenet = sys.argv[1], sys.argv[2]
def a16(n): return (n+15)//16*16
def encode(inp, tensors, ops, arena, out_t):
    # tensors: (c,h,w,scale,zp,offset); ops: dict
    n_t, n_o = len(tensors), len(ops)
    op_off = 80 + 32*n_t; d_off = a16(op_off + 64*n_o)
    data = bytearray()
    def put(b, al):
        if not b: return (0,0)
        while len(data)%al: data.append(0)
        o=len(data); data.extend(b); return (o,len(b))
    recs=bytearray()
    for op in ops:
        r=bytearray(64); r[0]=op['kind']
        struct.pack_into('<HHH',r,2,op['in0'],op.get('in1',0xFFFF),op['out'])
        r[8:12]=bytes(op.get('win',(0,0,0,0)))
        struct.pack_into('<ii',r,12,op.get('amin',-128),op.get('amax',127))
        arrs=[put(bytes(b&0xff for b in op.get('w',[])),16), put(b''.join(struct.pack('<i',x) for x in op.get('b',[])),4),
              put(b''.join(struct.pack('<i',x) for x in op.get('m',[])),4), put(b''.join(struct.pack('<i',x) for x in op.get('s',[])),4), (0,0)]
        for i,(o,l) in enumerate(arrs): struct.pack_into('<II',r,20+8*i,o,l)
        struct.pack_into('<I',r,60,op.get('scratch',0)); recs+=r
    f=bytearray(80); f[0:8]=b'OCTET8\r\n'
    struct.pack_into('<HH',f,8,2,80)
    struct.pack_into('<II',f,16,d_off+len(data),arena)
    struct.pack_into('<HHHHH',f,24,*inp,0,out_t)
    struct.pack_into('<IIIIII',f,36,n_t,80,n_o,op_off,d_off,len(data))
    struct.pack_into('<fi',f,60,tensors[out_t][3],tensors[out_t][4])
    for (c,h,w,sc,zp,off) in tensors:
        r=bytearray(32); struct.pack_into('<HHHHfiII',r,0,c,h,w,0,sc,zp,off,c*h*w); f+=r
    f+=recs; f+=bytes(d_off-len(f)); f+=data
    struct.pack_into('<I',f,12,zlib.crc32(bytes(f[16:]))&0xffffffff)
    return bytes(f)
C=65535; H=254
t=[(1,32,32,1/255,-128,0),(C,H,H,0.05,-128,1024)]
scr=a16(1024+C*H*H); pool=a16(scr+4096); fc=a16(pool+C)
t+=[(C,1,1,0.05,-128,pool),(10,1,1,0.1,0,fc)]
ops=[dict(kind=1,in0=0,out=1,win=(1,1,1,111),w=[1]*C,b=[0]*C,m=[1<<30]*C,s=[0]*C,scratch=scr),
     dict(kind=3,in0=1,out=2,win=(H,H,1,0)),
     dict(kind=2,in0=2,out=3,w=[1]*(10*C),b=[0]*10,m=[1<<30]*10,s=[0]*10)]
open(os.path.join(out, 'huge.o8'),'wb').write(encode((1,32,32),t,ops,fc+10,3))
b=bytearray(open(lenet,'rb').read())
open(os.path.join(out, 'lenet.o8'),'wb').write(b)
struct.pack_into('<I',b,20,0xFFFFFFFF); struct.pack_into('<I',b,12,zlib.crc32(bytes(b[16:]))&0xffffffff)
open(os.path.join(out, 'ffff.o8'),'wb').write(b)
